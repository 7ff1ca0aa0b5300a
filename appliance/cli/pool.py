"""``hvnet --pool NAME status``: an OVN pool's logical switches, ports, chassis and QoS, from its NB and SB."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from appliance.core import config, documents, labstate, render
from appliance.core.errors import EXIT_FAILED, EXIT_OK, UsageError
from appliance.core.hostlist import Inventory, InventoryPool, load
from appliance.core.target import SslOptions
from appliance.endpoints.guests import GuestSource
from appliance.frontdoor.hosts import build_host, data_paths, inventory_file
from appliance.services import isolation
from appliance.services.isolation import CheckResult, Scenario
from appliance.services.ovn import history as pool_history
from appliance.services.ovn import isolation as isolation_pool
from appliance.services.ovn import mirrors as pool_mirrors
from appliance.services.ovn import pool as pools
from appliance.services.ovn.pool import Journal, PoolView
from appliance.services.policy import Policy

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _pool(args: argparse.Namespace) -> tuple[Inventory, InventoryPool]:
    for flag in ("host", "db", "hosts"):
        if getattr(args, flag, None):
            raise UsageError(f"--pool names an OVN pool and --{flag} a switch: give one")
    path = inventory_file()
    if not path.exists():
        raise UsageError(f"--pool: no inventory at {path}", hint="write one with 'pools:', or set $HVNET_INVENTORY")
    inventory = load(path)
    return inventory, inventory.pool(args.pool)


def _connect(args: argparse.Namespace) -> pools.Connect:
    return lambda e: build_host(ssh_host=e.name, timeout=args.timeout)


def cmd_pool_status(args: argparse.Namespace) -> int:
    """The pool's view; exit 1 when a chassis has not caught up with the NB or could not be read."""
    inventory, entry = _pool(args)
    view = pools.status(entry, inventory, _connect(args), timeout=args.timeout, ssl=_ssl(args))
    if args.json:
        render.print_json(view.to_json())
    else:
        print(format_pool(view))
    return EXIT_FAILED if view.behind or view.notes else EXIT_OK


def _ssl(args: argparse.Namespace) -> SslOptions | None:
    env = config.environ()
    key = args.ssl_key or env.get("HVNET_SSL_KEY")
    cert = args.ssl_cert or env.get("HVNET_SSL_CERT")
    ca = args.ssl_ca or env.get("HVNET_SSL_CA")
    return SslOptions(key, cert, ca) if key and cert and ca else None


def format_pool(v: PoolView) -> str:
    """The pool at 80 columns: its databases, its chassis, then each logical switch's ports."""
    caught_up = "every chassis caught up" if not v.behind else f"NOT acknowledged by {', '.join(v.behind)}"
    lines = [f"pool {v.name}  NB {v.nb} (schema {v.nb_version or '?'})", f"  SB {v.sb}",
             f"  nb_cfg {v.nb_cfg}, hv_cfg {v.hv_cfg}: {caught_up}", ""]  # fmt: skip
    rows = [[c.name, c.hostname, ", ".join(c.encaps) or "-", str(c.ports), _cfg(c.nb_cfg)] for c in v.chassis]
    lines += (
        render.table(["CHASSIS", "HOSTNAME", "ENCAP", "PORTS", "NB_CFG"], rows).split("\n") if rows else ["no chassis"]
    )
    for s in v.switches:
        vlan = f" (VLAN {s.vlan})" if s.vlan is not None else ""
        lines += ["", f"switch {s.name}{vlan}: {len(s.ports)} port{'s' if len(s.ports) != 1 else ''}"]
        mirrored = any(p.mirrors for p in s.ports)  # the column only where a port is mirrored: 80 columns
        rows = [[p.vm or "-", _short(p.name), p.chassis or "(unbound)", " ".join(p.addresses) or "-",
                 _up(p.up), _qos(p.qos_max_rate_bps)] + ([",".join(p.mirrors) or "-"] if mirrored else [])
                for p in sorted(s.ports, key=lambda p: (p.vm is None, p.vm or "", p.name))]  # fmt: skip
        if rows:
            heads = ["VM", "PORT", "CHASSIS", "ADDRESSES", "UP", "QOS"] + (["MIRRORS"] if mirrored else [])
            lines += render.table(heads, rows).split("\n")
        for q in s.qos:
            limit = f"rate {q.rate_kbps} kbit/s burst {q.burst_kbit} kbit" if q.rate_kbps else ""
            mark = f"dscp {q.dscp}" if q.dscp is not None else ""
            match = _UUID.sub(lambda m: _short(m.group(0)), q.match)
            lines.append(f"  qos {q.direction}/{q.priority} {match!r} {limit} {mark}".rstrip())
    for m in v.mirrors:
        lines.append(f"mirror {m.name}: {m.type} to {m.sink} (index {m.index}, {m.filter})")
    lines += [f"note: {n}" for n in v.notes]
    return render.lines(lines)  # one line each: a name cannot steer nor add a line


def _short(name: str) -> str:
    """A port named by a uuid (as libvirt and OpenStack name them) by its first 8 digits; --json has it all."""
    return name[:8] + "…" if len(name) == 36 and name.count("-") == 4 else name


def _cfg(n: int | None) -> str:
    return "-" if n is None else str(n)


def _up(up: bool | None) -> str:
    return "-" if up is None else ("yes" if up else "NO")


def _qos(bps: int | None) -> str:
    return "-" if bps is None else render.kbps(bps / 1000)


def _journal(inventory: Inventory, entry: InventoryPool) -> Journal:
    """The pool's records and audit lines: the lab's own when the pool is the running lab's (its inventory
    is in the lab's directory, so 'lab down' takes them away), else this machine's state directory."""
    env = config.environ()
    run_dir = labstate.lab_dir(env).resolve()
    is_lab = Path(inventory.file).resolve().parent == run_dir
    return pool_history.pool_journal(entry.name, data_paths(env, run_dir if is_lab else None))


def _command_line() -> str:
    return " ".join(["hvnet", *sys.argv[1:]])


def cmd_pool_policy(args: argparse.Namespace, verb: str, policy: Policy) -> int:
    """``plan``, ``apply`` or ``verify`` of a policy file on the pool (its NB: QoS rules, logical switch
    membership, Mirror rows)."""
    if verb == "apply":
        _refuse_host_only(args)
        if getattr(args, "dry_run", False):
            verb = "plan"
    inventory, entry = _pool(args)
    connect, ssl = _connect(args), _ssl(args)
    if verb == "apply":
        out = pools.apply_pool(entry, inventory, connect, policy, timeout=args.timeout, ssl=ssl,
                               wait_s=args.pool_wait, journal=_journal(inventory, entry),
                               comment=_command_line(), stop_at=config.environ().get("HVNET_STOP_AT"))  # fmt: skip
    else:
        out = pools.plan_pool(entry, inventory, connect, policy, timeout=args.timeout, ssl=ssl)
        if verb == "verify":
            out.enforced = pools.enforcement(out.view, out.plan.unchanged, inventory, entry, connect, args.timeout)
            out.mirrored = pool_mirrors.check(out.view, out.plan.mirrors_unchanged, inventory, entry,
                                                     connect, args.timeout)  # fmt: skip
    if args.json:
        render.print_json(outcome_json(out))
    else:
        print(format_outcome(out, verb))
    if verb == "verify" and out.plan.changed:
        return EXIT_FAILED  # drift: the NB is not what the policy says
    return out.exit_code


def _refuse_host_only(args: argparse.Namespace) -> None:
    """Options of a host's apply that a pool's cannot honour: refused, never silently dropped."""
    why = {
        "no_commit": "--no-commit: a pool's apply has no automatic rollback; apply, then 'hvnet --pool NAME rollback'",
        "policing": "--policing: an OVN pool polices with OVN's meters (QoS rules), there is nothing to choose",
        "no_wait": "--no-wait: a pool's apply waits for the chassis' acknowledgements (--pool-wait S bounds it)",
        "no_verify": "--no-verify: a pool's apply always checks each chassis (--pool-wait S bounds the wait)",
    }
    for attr, message in why.items():
        if getattr(args, attr, None):
            raise UsageError(message)


def cmd_pool_rollback(args: argparse.Namespace) -> int:
    """Undo the last apply on the pool (its record): one NB transaction, acknowledged, audited."""
    inventory, entry = _pool(args)
    out = pools.rollback_pool(entry, inventory, _connect(args), _journal(inventory, entry), timeout=args.timeout,
                              wait_s=args.pool_wait, ssl=_ssl(args), comment=_command_line(),
                              stop_at=config.environ().get("HVNET_STOP_AT"))  # fmt: skip
    if args.json:
        render.print_json(outcome_json(out))
    else:
        print(format_outcome(out, "rollback"))
    return out.exit_code


def cmd_pool_export(args: argparse.Namespace) -> int:
    """The pool's intent as a policy file (one that plans no change on the pool)."""
    inventory, entry = _pool(args)
    out = pools.export_pool(entry, inventory, _connect(args), by=args.by, timeout=args.timeout, ssl=_ssl(args))
    if args.json:
        render.print_json(documents.POLICY.stamp(out.document))
    elif args.out:
        Path(args.out).write_text(out.yaml, encoding="utf-8")
        print(f"wrote {args.out} ({out.vifs} VIF rules, {out.mirrors} mirrors)")
    else:
        render.exact_stdout().write(out.yaml)  # YAML quotes what it must itself
    return EXIT_OK


def outcome_json(out: pools.PoolOutcome) -> dict[str, object]:
    return documents.POOL_OUTCOME.stamp(
        {
            "pool": out.view.name,
            "changes": out.plan.lines(),
            "moves": [{"port": m.port, "vm": m.vm, "from": m.src, "to": m.dst, "vlan": m.vlan} for m in out.plan.moves],
            "nb_cfg": out.nb_cfg,
            "acknowledged_s": round(out.acks.seconds, 3) if out.acks else None,
            "behind": out.acks.behind if out.acks else [],
            "enforced": [_enforced_json(e) for e in out.enforced],
            "mirrored": [vars(m) for m in out.mirrored],
            **({"undone": out.undone} if out.undone else {}),
            "settled": out.settled,
        }
    )


def _enforced_json(e: pools.Enforced) -> dict[str, object]:
    lim = e.limit
    # version 2: the limit in bit/s and bits (the pool keeps it in kbit/s and kbit, as OVN's QoS rows do)
    return {"port": lim.port, "vm": lim.vm, "direction": lim.direction, "rate_bits_per_s": lim.rate_kbps * 1000,
            "burst_bits": lim.burst_kbit * 1000, "chassis": e.chassis, "state": e.state,
            "detail": e.detail}  # fmt: skip


def format_outcome(out: pools.PoolOutcome, verb: str) -> str:
    if verb == "rollback":
        head = (f"undoing {out.undone}: {len(out.plan.lines())} change(s)" if out.plan.changed else
                f"{out.undone}: the pool already has the values it replaced; nothing to undo")  # fmt: skip
    else:
        head = f"{len(out.plan.lines())} change(s)" if out.plan.changed else "the NB already matches the policy"
    lines = [f"note: settled an interrupted apply: {line}" for line in out.settled]
    lines.append(f"pool {out.view.name}: {head}")
    lines += [f"  {line}" for line in out.plan.lines()]
    if verb == "verify" and out.plan.changed:
        lines.append("drift: the pool's NB differs from the policy (hvnet --pool NAME apply FILE)")
    if out.nb_cfg is not None and out.acks is not None:
        if out.acks.complete:
            lines.append(f"committed in the NB (nb_cfg {out.nb_cfg}); every chassis acknowledged it in "
                         f"{out.acks.seconds * 1000:.0f} ms")  # fmt: skip
        else:
            lines.append(f"committed in the NB (nb_cfg {out.nb_cfg}); NOT acknowledged within "
                         f"{out.acks.seconds:.0f} s by: {', '.join(out.acks.behind)}")  # fmt: skip
    for e in out.enforced:
        mark = {"enforced": "enforced", "missing": "NOT ENFORCED", "unknown": "unknown"}[e.state]
        lines.append(f"  {mark}: {e.limit.describe()} ({e.detail})")
    for m in out.mirrored:
        mark = {"present": "mirrored", "missing": "NOT MIRRORED", "unknown": "unknown"}[m.state]
        lines.append(f"  {mark}: {m.vm or m.port} by {m.row} ({m.detail})")
    return render.lines(lines)  # one line each: a name cannot steer nor add a line


def check_pool_scenario(args: argparse.Namespace, sc: Scenario, guests: GuestSource) -> CheckResult:
    """``hvnet [--pool NAME] isolation check FILE`` on an OVN pool: ``--pool``'s, else the lab's (the lab
    names its pool after its topology)."""
    if not sc.topology.ovn:
        raise UsageError(f"--pool {args.pool}: scenario {sc.name}'s topology {sc.topology.file} is not an OVN pool",
                         hint="a pool scenario's topology has 'ovn: {switches: [...]}'")  # fmt: skip
    if args.pool:
        inventory, entry = _pool(args)
    else:
        path = inventory_file()
        if not path.exists():
            raise UsageError(
                f"scenario {sc.name} runs on an OVN pool and no inventory names one ({path})",
                hint=f"bring up its lab: hvnet lab up --topology {sc.topology.file}, or give --pool",
            )
        inventory = load(path)
        entry = inventory.pool(sc.topology.name)
    return isolation_pool.run_pool_check(
        sc, guests, entry, inventory, _connect(args), isolation.methods_of(args.method),
        Path(args.out) if args.out else None, root_hint="run as root, or use --method trace",
        timeout=args.timeout, ssl=_ssl(args),
    )  # fmt: skip
