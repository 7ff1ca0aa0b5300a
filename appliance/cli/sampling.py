"""``hvnet sflow set|clear BRIDGE`` and ``hvnet ipfix set|clear BRIDGE``.

The flags spell the policy file's keys (``--sampling`` is ``sampling:``,
``--target`` one of ``targets:``), so the same values are refused with the
same words; the rule goes through the policy service like a one-bridge
policy file: one transaction, audited, recorded for ``hvnet rollback``.
"""

from __future__ import annotations

import argparse

from appliance.cli.policy import _engine, _finish
from appliance.core.errors import ConfigError, Problem
from appliance.services import policy as svc
from appliance.switch import sampling

# The flags of each kind, by the policy key they set.
FLAGS = {
    "sflow": {"targets": "--target", "sampling": "--sampling", "polling": "--polling", "header": "--header",
              "agent": "--agent"},
    "ipfix": {"targets": "--target", "sampling": "--sampling", "obs_domain_id": "--obs-domain-id",
              "obs_point_id": "--obs-point-id", "cache_active_timeout": "--cache-active-timeout",
              "cache_max_flows": "--cache-max-flows"},
}  # fmt: skip


def cmd_set(args: argparse.Namespace) -> int:
    flags = FLAGS[args.kind]
    values = {key: getattr(args, flag[2:].replace("-", "_")) for key, flag in flags.items()}
    try:
        rule = svc.sampling_rule(args.bridge, args.kind, values)
    except sampling.SamplingFieldError as exc:
        raise ConfigError([Problem("command line", None, flags[f], m) for f, m in exc.problems]) from None
    with _engine(args) as eng:
        return _finish(args, svc.set_sampling(eng, rule, dry_run=args.dry_run))


def cmd_clear(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        return _finish(args, svc.clear_sampling(eng, args.bridge, args.kind, dry_run=args.dry_run))
