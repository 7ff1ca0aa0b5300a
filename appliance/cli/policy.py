"""``hvnet plan | apply | verify | export | commit | rollback | vif | qos | mirror``.

The declarative commands take a policy file; the imperative ones build the
same policy fragment from their arguments, so both go through one planner and
one transaction path.  Every command has ``--json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from appliance.core import config, documents, render, units
from appliance.core.errors import (
    EXIT_FAILED,
    EXIT_OK,
    ConfigError,
    ConflictError,
    OvsdbUnreachable,
    Problem,
    UsageError,
)
from appliance.core.systemd import Notifier, log_handler
from appliance.frontdoor.hosts import configured_host, host_of
from appliance.services import confirm, engine, mirrors
from appliance.services import fleet_policy as pool
from appliance.services import policy as svc
from appliance.services.policy import DEFAULT_POLICY, ApplyResult, FieldError, Plan, Policy, PolicyEngine, change_json
from appliance.switch.host import Host

WATCHER_PATIENCE_S = 600.0


def _engine(args: argparse.Namespace, host: Host | None = None) -> PolicyEngine:
    """An engine on ``host`` (else the one the global options name), ``--policing`` applied."""
    return engine.open_engine(
        host or host_of(args), _command_line(), timeout=args.timeout, policing=getattr(args, "policing", None),
        pool=bool(getattr(args, "hosts", None)),  # one policy for several hosts: see services.fleet_policy
    )  # fmt: skip


def _command_line() -> str:
    return " ".join(["hvnet", *sys.argv[1:]])


def policy_file(args: argparse.Namespace) -> str:
    """The policy FILE argument, else ``$HVNET_POLICY``, ``[agent] policy`` in hvnet.conf, the default."""
    return args.file or config.environ().get("HVNET_POLICY") or DEFAULT_POLICY


# -- formatting --------------------------------------------------------------


def format_plan(plan: Plan) -> str:
    if not plan.changes:
        return "no changes: the switch already matches"
    rows = [[c.target, c.kind, c.describe(c.before), c.describe(c.after)] for c in plan.changes]
    lines = [render.table(["TARGET", "SETTING", "BEFORE", "AFTER"], rows)]
    for c in plan.changes:
        if c.note:
            lines.append(f"  note: {c.target}: {c.note}")
    return "\n".join(lines)


def format_warnings(plan: Plan) -> list[str]:
    return [f"warning: {w}" for w in plan.warnings]


def format_result(result: ApplyResult) -> str:
    lines = [format_plan(result.plan), *format_warnings(result.plan)]
    n = len(result.plan.changes)
    if result.status == "applied":
        lines.append(f"applied {n} change{'s' if n != 1 else ''} in one transaction ({result.attempts} attempt(s))")
    elif result.status == "unchanged":
        lines.append("nothing to apply")
    elif result.status == "dry-run":
        lines.append(f"dry run: {n} change{'s' if n != 1 else ''} would be applied; nothing was changed")
    else:
        lines.append(f"{result.status}: nothing of this change is left on the switch")
    for e in result.enforcement:
        lines.append(f"  {e.port} {e.kind}: {e.verdict} by {e.mechanism}: {e.detail}")
    for port, why in result.isolated.items():
        lines.append(f"  ISOLATED {port}: {why}")
    for p in result.problems:
        lines.append(f"problem: {p}")
    return "\n".join(lines)


def _finish(args: argparse.Namespace, result: ApplyResult) -> int:
    if args.json:
        render.print_json(result.to_json())
    else:
        print(format_result(result))
    return EXIT_OK if result.ok else EXIT_FAILED


# -- declarative -------------------------------------------------------------------


def cmd_plan(args: argparse.Namespace) -> int:
    policy = svc.load_policy(policy_file(args))
    if getattr(args, "pool", None):
        from appliance.cli.pool import cmd_pool_policy

        return cmd_pool_policy(args, "plan", policy)  # validated before connecting
    if getattr(args, "hosts", None):
        return _on_hosts(args, "plan", policy)
    plan, code = plan_on(host_of(args), args, policy)
    if args.json:
        render.print_json(plan_json(plan))
    else:
        print(plan_text(plan))
    return code


def plan_on(
    host: Host, args: argparse.Namespace, policy: Policy, gate: pool.PlanGate | None = None
) -> tuple[Plan, int]:
    """``plan`` on one host: the plan and the exit code (for one host or each of ``--hosts``, whose
    plans meet at ``gate``)."""
    with _engine(args, host) as eng:
        plan = svc.plan(eng, policy)
    if gate is not None:
        plan.warnings += gate.arrive(host.label or host.remote, plan.matched)
    return plan, EXIT_OK


def plan_json(plan: Plan) -> dict[str, Any]:
    changes = [change_json(c) for c in plan.changes]
    return documents.POLICY_PLAN.stamp({"changes": changes, "warnings": plan.warnings, "matched": plan.matched})


def plan_text(plan: Plan) -> str:
    lines = [format_plan(plan), *format_warnings(plan)]
    if plan.changes:
        lines.append(f"{len(plan.changes)} change(s); nothing was changed (plan only)")
    return "\n".join(lines)


def cmd_apply(args: argparse.Namespace) -> int:
    policy = svc.load_policy(policy_file(args))
    if getattr(args, "pool", None):
        from appliance.cli.pool import cmd_pool_policy

        return cmd_pool_policy(args, "apply", policy)
    if getattr(args, "hosts", None):
        return _on_hosts(args, "apply", policy)
    result, _ = apply_on(host_of(args), args, policy)
    return _finish(args, result)


def apply_on(
    host: Host, args: argparse.Namespace, policy: Policy, gate: pool.PlanGate | None = None
) -> tuple[ApplyResult, int]:
    """``apply`` on one host, as one transaction there: the result and the exit code.  With ``gate``
    (``--hosts``) the host plans first and applies only once every host's plan passed the gate."""
    with _engine(args, host) as eng:
        warnings = gate.arrive(host.label or host.remote, svc.plan(eng, policy).matched) if gate else []
        result = svc.apply(
            eng, policy, dry_run=args.dry_run, verify=not args.no_verify, wait=not args.no_wait,
            confirm_within=args.commit_timeout if args.no_commit else None,
        )  # fmt: skip
    result.plan.warnings += warnings
    return result, EXIT_OK if result.ok else EXIT_FAILED


def cmd_verify(args: argparse.Namespace) -> int:
    policy = svc.load_policy(policy_file(args))
    if getattr(args, "pool", None):
        from appliance.cli.pool import cmd_pool_policy

        return cmd_pool_policy(args, "verify", policy)
    if getattr(args, "hosts", None):
        return _on_hosts(args, "verify", policy)
    found, code = verify_on(host_of(args), args, policy)
    if args.json:
        render.print_json(drift_json(found))
    else:
        print(drift_text(found, policy_file(args)))
    return code


def verify_on(
    host: Host, args: argparse.Namespace, policy: Policy, gate: pool.PlanGate | None = None
) -> tuple[svc.Drift, int]:
    """``verify`` on one host (read-only): the drift found and the exit code (1 on drift)."""
    with _engine(args, host) as eng:
        found = svc.verify(eng, policy)
    if gate is not None:
        found.warnings += gate.arrive(host.label or host.remote, found.matched)
    return found, EXIT_OK if found.in_sync else EXIT_FAILED


def drift_json(found: svc.Drift) -> dict[str, Any]:
    """``verify --json``: document ``hvnet.policy.verify``."""
    return documents.POLICY_VERIFY.stamp({"in_sync": found.in_sync, "drift": found.drift, "warnings": found.warnings})


def drift_text(found: svc.Drift, path: str) -> str:
    if not found.drift:
        return f"in sync: the switch matches {path}"
    table = render.table(["TARGET", "SETTING", "EXPECTED", "FOUND"], [list(d.values()) for d in found.drift])
    return f"{table}\ndrift: {len(found.drift)} setting(s) differ from {path}"


def _on_hosts(args: argparse.Namespace, name: str, policy: Policy) -> int:
    """``plan|apply|verify --hosts``: the one-host function on each host, side by side (see cli_fleet)."""
    from appliance.cli import fleet as cli_fleet
    from appliance.cli.fleet import tally

    gate = pool.PlanGate(policy, timeout=args.host_timeout)
    if name == "plan":
        verb = cli_fleet.Verb(
            work=lambda host, _entry: plan_on(host, args, policy, gate),
            result=lambda p: "changes" if p.changes else "no changes",
            detail=lambda p: tally((len(p.changes), "change"), (len(p.warnings), "warning")),
            text=plan_text,
            json=plan_json,
            gate=gate,
        )
    elif name == "apply":
        verb = cli_fleet.Verb(
            work=lambda host, _entry: apply_on(host, args, policy, gate),
            result=lambda r: r.status if r.ok else f"{r.status}, problems",
            detail=lambda r: tally((len(r.plan.changes), "change"), (len(r.problems), "problem")),
            text=format_result,
            json=lambda r: r.to_json(),
            changes_hosts=not args.dry_run,
            gate=gate,
        )
    else:
        verb = cli_fleet.Verb(
            work=lambda host, _entry: verify_on(host, args, policy, gate),
            result=lambda d: "in sync" if d.in_sync else "drift",
            detail=lambda d: f"{len(d.drift)} differ" if d.drift else "-",
            text=lambda d: drift_text(d, policy_file(args)),
            json=drift_json,
            gate=gate,
        )
    return cli_fleet.run(args, verb)


def cmd_export(args: argparse.Namespace) -> int:
    if getattr(args, "pool", None):
        from appliance.cli.pool import cmd_pool_export

        return cmd_pool_export(args)
    with _engine(args) as eng:
        out = svc.export(eng, by=args.by)
    if args.json:
        render.print_json(documents.POLICY.stamp(out.document))
    elif args.out:
        Path(args.out).write_text(out.yaml, encoding="utf-8")
        print(f"wrote {args.out} ({out.vifs} VIFs, {out.mirrors} mirrors)")
    else:
        render.exact_stdout().write(out.yaml)  # YAML quotes what it must itself
    return EXIT_OK


def cmd_commit(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        done = confirm.commit(eng)
    if args.json:
        render.print_json(commit_json(done))
    else:
        print(commit_json(done)["message"])
    return EXIT_OK


def commit_json(done: confirm.Pending | None) -> dict[str, Any]:
    """``commit --json``: document ``hvnet.policy.commit``, the change kept (``committed`` false: none pending)."""
    if done is None:
        return documents.POLICY_COMMIT.stamp(
            {
                "committed": False,
                "id": None,
                "changes": 0,
                "message": "nothing to commit: no --no-commit apply is pending",
            }
        )
    return documents.POLICY_COMMIT.stamp({"committed": True, "id": done.id, "changes": done.changes,
                                          "message": f"committed {done.id} ({done.changes} change(s)); automatic "
                                          "rollback cancelled"})  # fmt: skip


def cmd_rollback(args: argparse.Namespace) -> int:
    if args.pending:
        return _watch(args)
    if getattr(args, "pool", None):
        from appliance.cli.pool import cmd_pool_rollback

        return cmd_pool_rollback(args)
    with _engine(args) as eng:
        result = confirm.rollback(eng)
    assert result is not None
    return _finish(args, result)


def _watch(args: argparse.Namespace) -> int:
    """The detached watcher of a --no-commit apply: at the deadline, roll back unless committed.

    A database that cannot be reached then (ovsdb-server restarting) is
    retried with a growing delay for :data:`WATCHER_PATIENCE_S`; after that
    the record stays overdue and the next hvnet run on this switch rolls it
    back (``settle_overdue``).  Its output is its log, never JSON.
    """
    from appliance.core.ssh import AuthRefused, HostUnreachable

    at = float(args.at)
    confirm.wait_until(at)  # before connecting: a connection idle for the whole window goes stale
    delay = 1.0
    while True:
        try:
            with _engine(args) as eng:
                result = confirm.rollback(eng, pending_id=args.pending, at=at)
            break
        except (OvsdbUnreachable, ConflictError, HostUnreachable) as exc:
            if isinstance(exc, AuthRefused):
                raise
            # a host cut off by the change itself: its own timer undoes it, and this learns it once it answers
            if time.time() > at + WATCHER_PATIENCE_S:
                print(f"gave up after {WATCHER_PATIENCE_S:.0f} s: {exc.message}; the next hvnet run rolls it back")
                return exc.exit_code
            print(f"{time.strftime('%H:%M:%S')} cannot roll back yet ({exc.message}); retrying in {delay:.0f} s")
            sys.stdout.flush()
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
    if result is None:
        return EXIT_OK  # committed (or rolled back by hand) in time
    print(format_result(result))
    return EXIT_OK if result.ok else EXIT_FAILED


# -- imperative ----------------------------------------------------------------------


def _cli_problem(field: str, message: str) -> ConfigError:
    return ConfigError([Problem("command line", None, field, message)])


def cmd_vif_set(args: argparse.Namespace) -> int:
    if args.tag is None and args.trunks is None and args.vlan_mode is None:
        raise UsageError("give at least one of --tag, --trunks, --vlan-mode")
    with _engine(args) as eng:
        try:
            rule = svc.vlan_rule(eng, args.vif, mode=args.vlan_mode, tag=args.tag, trunks=args.trunks)
        except FieldError as exc:
            field = {"mode": "--vlan-mode", "tag": "--tag", "trunks": "--trunks"}.get(exc.field, "--vlan-mode")
            raise _cli_problem(field, str(exc)) from None
        return _finish(args, svc.edit_vif(eng, rule, dry_run=args.dry_run))


def cmd_qos_set(args: argparse.Namespace) -> int:
    if args.ingress_rate is None and args.egress_rate is None:
        raise UsageError("give --ingress-rate and/or --egress-rate")
    try:
        rule = svc.qos_rule(
            "?",
            ingress_rate=args.ingress_rate,
            ingress_burst=args.ingress_burst,
            mechanism=args.mechanism,
            egress_rate=args.egress_rate,
            egress_burst=args.egress_burst,
        )
    except FieldError as exc:
        raise _cli_problem("--" + exc.field.replace(".", "-"), str(exc)) from None
    for flag in ("--ingress-rate", "--ingress-burst", "--egress-rate", "--egress-burst"):
        given = getattr(args, flag[2:].replace("-", "_"))
        if given is not None and (note := units.rounding_note(given, flag, rate=flag.endswith("rate"))):
            print(f"note: {note}", file=sys.stderr)
    with _engine(args) as eng:
        return _finish(args, svc.set_qos(eng, args.vif, rule, dry_run=args.dry_run))


def cmd_qos_clear(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        return _finish(args, svc.clear_qos(eng, args.vif, dry_run=args.dry_run))


def cmd_mirror_add(args: argparse.Namespace) -> int:
    outputs = {
        "port": args.output_port,
        "vlan": args.output_vlan,
        "gre": args.output_gre,
        "erspan": args.output_erspan,
    }
    given = {k: v for k, v in outputs.items() if v is not None}
    if len(given) != 1:
        raise UsageError("give exactly one of --output-port, --output-vlan, --output-gre, --output-erspan")
    spec: dict[str, Any] = dict(given)
    if args.key is not None:
        spec["key"] = args.key
    if not (args.all or args.src or args.dst or args.vlan is not None):
        raise UsageError("the mirror selects nothing: give --src, --dst, --vlan or --all")
    try:
        rule = mirrors.mirror_rule(
            args.bridge,
            args.name,
            output=spec,
            src=args.src,
            dst=args.dst,
            vlans=args.vlan,
            select_all=args.all,
            snaplen=args.snaplen,
            filter=args.filter,
            allow_isolation_exception=args.allow_isolation_exception,
            where={"src": "--src", "dst": "--dst"},
        )
    except FieldError as exc:
        flag = {"output.key": "--key", "output.idx": "--key", "select": "--all"}.get(exc.field)
        if flag is None:
            flag = "--output-" + exc.field.split(".")[-1] if exc.field.startswith("output") else "--" + exc.field
        raise _cli_problem(flag, str(exc)) from None
    with _engine(args) as eng:
        return _finish(args, mirrors.add_mirror(eng, rule, dry_run=args.dry_run, may_exist=args.may_exist))


def cmd_mirror_del(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        return _finish(
            args, mirrors.delete_mirror(eng, args.name, args.bridge, dry_run=args.dry_run, if_exists=args.if_exists)
        )


def cmd_mirror_list(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        out = mirrors.list_mirrors(eng)
    rows = [[m["bridge"], m["name"], m["owner"], m["config"], render.count(m["tx_packets"]) + " pkt",
             "-" if m["tx_bytes"] is None else render.si(m["tx_bytes"], "B")] for m in out]  # fmt: skip
    if args.json:
        render.print_json(documents.MIRROR_LIST.stamp({"mirrors": out}))
    elif rows:
        print(render.table(["BRIDGE", "MIRROR", "OWNER", "SELECT -> OUTPUT", "TX", "TX BYTES"], rows))
    else:
        print("no mirrors")
    return EXIT_OK


def cmd_agent(args: argparse.Namespace) -> int:
    import logging

    from appliance.agent.daemon import ENFORCED, Agent

    if args.prepare:
        return _agent_prepare(args)
    path = args.policy or config.environ().get("HVNET_POLICY") or DEFAULT_POLICY
    policing = config.resolve("agent.policing", args.policing, flag_name="--policing").value
    svc.load_policy(path, trusted=ENFORCED)  # refuse to start on an invalid or untrusted policy, before connecting
    root = logging.getLogger("hvnet")
    # the journal's "<N>message" under systemd (journald adds the time), else a timestamp and the level
    root.handlers[:] = [log_handler("hvnet-agent", timestamps=True)]
    root.propagate = False
    root.setLevel(logging.DEBUG if args.verbose > 1 else logging.INFO)
    notifier = Notifier()
    host, conn = _agent_connect(args, notifier)
    agent = Agent(conn, host, path, tick=args.tick, notifier=notifier, policing=policing)
    agent.install_signal_handlers()
    agent.run()
    conn.close()
    return EXIT_OK


def _agent_prepare(args: argparse.Namespace) -> int:
    """What the agent's unit runs first, with the privileges its sandbox then takes away: whether this
    kernel enforces tc's police action is probed in a throwaway network namespace (which needs
    CAP_SYS_ADMIN and mounts) and cached for the boot, where the sandboxed agent reads it."""
    host = host_of(args)
    answer = engine.tc_police(host)
    said = "works" if answer.works else "does not work"
    if answer.cached is not None:
        print(f"hvnet: tc police {said} on this kernel (cached for this boot in {answer.cached})")
    else:
        print(f"hvnet: tc police {said} for now: {answer.why}; not cached, probed again at the next start")
    return EXIT_OK


def _agent_connect(args: argparse.Namespace, notifier: Notifier) -> tuple[Host, Any]:
    """The host and its database.  A remote hypervisor that cannot be reached when the agent starts (it
    is rebooting, its network is down) is tried again with back-off, one log line per attempt, until it
    answers or the agent is stopped; a refused host key, refused authentication or a bad option is not
    retried (a person must act), nor is this machine's own switch (its unit restarts the agent)."""
    import logging
    import signal

    from appliance.agent.link import Backoff
    from appliance.core.ssh import AuthRefused, HostUnreachable

    log = logging.getLogger("hvnet.agent")
    backoff, attempt = Backoff(), 0
    stop = {"now": False}
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    try:
        while True:
            try:
                host = host_of(args)
                return host, engine.connect(host, timeout=args.timeout, statistics=False)
            except (OvsdbUnreachable, HostUnreachable) as exc:
                remote = getattr(args, "host", None) or configured_host(args.db)
                if not remote or isinstance(exc, AuthRefused):  # a refused host key is no HostUnreachable
                    raise
                _close_host(args)
                attempt += 1
                delay = backoff.failed()
                log.warning("start: attempt %d: %s; next in %.0f s", attempt, exc.message, delay)
                notifier.set_status(f"start: attempt {attempt}: {exc.message}"[:400])
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline and not stop["now"]:
                    notifier.pet()
                    time.sleep(0.1)
                if stop["now"]:
                    raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _close_host(args: argparse.Namespace) -> None:
    host = getattr(args, "_host", None)
    if host is not None:
        host.close()
        args._host = None


# -- parser ----------------------------------------------------------------------------
