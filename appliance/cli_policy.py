"""``hvnet plan | apply | verify | export | commit | rollback | vif | qos | mirror``.

The declarative commands take a policy file; the imperative ones build the
same policy fragment from their arguments, so both go through one planner and
one transaction path.  Every command has ``--json``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from . import api, render
from .errors import EXIT_FAILED, EXIT_OK, ConfigError, Problem, UsageError
from .frontdoor import host_of
from .policy import COLUMNS, DEFAULT_POLICY, ApplyResult, Plan, PolicyEngine, describe, intents, load
from .policy.engine import change_json
from .policy.fields import FieldError
from .services import policy as svc


def _engine(args: argparse.Namespace) -> PolicyEngine:
    host = host_of(args)
    conn = api.connect(host, timeout=args.timeout, columns=COLUMNS)
    engine = PolicyEngine(conn, host, command=_command_line())
    if getattr(args, "policing", None):
        engine.force_policing = args.policing
    return engine


def _command_line() -> str:
    return " ".join(["hvnet", *sys.argv[1:]])


def _policy_file(args: argparse.Namespace) -> str:
    return args.file or os.environ.get("HVNET_POLICY") or DEFAULT_POLICY


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
    policy = load(_policy_file(args))  # validated before connecting
    with _engine(args) as eng:
        plan = svc.plan(eng, policy)
    if args.json:
        render.print_json(
            {"changes": [change_json(c) for c in plan.changes], "warnings": plan.warnings, "matched": plan.matched}
        )
    else:
        print("\n".join([format_plan(plan), *format_warnings(plan)]))
        if plan.changes:
            print(f"{len(plan.changes)} change(s); nothing was changed (plan only)")
    return EXIT_OK


def cmd_apply(args: argparse.Namespace) -> int:
    policy = load(_policy_file(args))
    with _engine(args) as eng:
        result = svc.apply(
            eng, policy, dry_run=args.dry_run, verify=not args.no_verify, wait=not args.no_wait,
            confirm_within=args.commit_timeout if args.no_commit else None,
        )  # fmt: skip
    return _finish(args, result)


def cmd_verify(args: argparse.Namespace) -> int:
    policy = load(_policy_file(args))
    with _engine(args) as eng:
        found = svc.verify(eng, policy)
    if args.json:
        render.print_json({"in_sync": found.in_sync, "drift": found.drift, "warnings": found.warnings})
    elif found.drift:
        print(render.table(["TARGET", "SETTING", "EXPECTED", "FOUND"], [list(d.values()) for d in found.drift]))
        print(f"drift: {len(found.drift)} setting(s) differ from {_policy_file(args)}")
    else:
        print(f"in sync: the switch matches {_policy_file(args)}")
    return EXIT_OK if found.in_sync else EXIT_FAILED


def cmd_export(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        out = svc.export(eng, by=args.by)
    if args.json:
        render.print_json(out.document)
    elif args.out:
        Path(args.out).write_text(out.yaml, encoding="utf-8")
        print(f"wrote {args.out} ({out.vifs} VIFs, {out.mirrors} mirrors)")
    else:
        sys.stdout.write(out.yaml)
    return EXIT_OK


def cmd_commit(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        done = svc.commit(eng)
    if done is None:
        msg = "nothing to commit: no --no-commit apply is pending"
        _out(args, {"committed": False, "message": msg}, msg)
        return EXIT_OK
    msg = f"committed {done.id} ({done.changes} change(s)); automatic rollback cancelled"
    _out(args, {"committed": True, "id": done.id}, msg)
    return EXIT_OK


def _out(args: argparse.Namespace, obj: dict[str, Any], text: str) -> None:
    if args.json:
        render.print_json(obj)
    else:
        print(text)


def cmd_rollback(args: argparse.Namespace) -> int:
    if args.pending:
        svc.wait_until(float(args.at))  # before connecting: a connection idle for the whole window goes stale
    with _engine(args) as eng:
        result = svc.rollback(eng, pending_id=args.pending, at=float(args.at) if args.at else None)
    if args.pending:  # the detached watcher of a --no-commit apply: its log, never JSON
        if result is None:
            return EXIT_OK  # committed (or rolled back by hand) in time
        print(format_result(result))
        return EXIT_OK if result.ok else EXIT_FAILED
    assert result is not None
    return _finish(args, result)


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
        rule = intents.qos_rule(
            "?",
            ingress_rate=args.ingress_rate,
            ingress_burst=args.ingress_burst,
            mechanism=args.mechanism,
            egress_rate=args.egress_rate,
            egress_burst=args.egress_burst,
        )
    except FieldError as exc:
        raise _cli_problem("--" + exc.field.replace(".", "-"), str(exc)) from None
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
        rule = intents.mirror_rule(
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
        return _finish(args, svc.add_mirror(eng, rule, dry_run=args.dry_run))


def cmd_mirror_del(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        return _finish(args, svc.delete_mirror(eng, args.name, args.bridge, dry_run=args.dry_run))


def cmd_mirror_list(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        state = eng.snapshot()
    rows = []
    out = []
    for (br, name), m in sorted(state.mirrors.items()):
        stats = m.statistics
        entry = {
            "bridge": br,
            "name": name,
            "owner": "hvnet" if m.cols.owned else "other",
            "config": describe("mirror", m.cols),
            "tx_packets": stats.get("tx_packets"),
            "tx_bytes": stats.get("tx_bytes"),
        }
        out.append(entry)
        rows.append([br, name, entry["owner"], entry["config"], render.count(stats.get("tx_packets")) + " pkt",
                     render.si(stats["tx_bytes"], "B") if "tx_bytes" in stats else "-"])  # fmt: skip
    if args.json:
        render.print_json({"mirrors": out})
    elif rows:
        print(render.table(["BRIDGE", "MIRROR", "OWNER", "SELECT -> OUTPUT", "TX", "TX BYTES"], rows))
    else:
        print("no mirrors")
    return EXIT_OK


def cmd_agent(args: argparse.Namespace) -> int:
    import logging

    from .policy.agent import Agent

    path = args.policy or os.environ.get("HVNET_POLICY") or DEFAULT_POLICY
    load(path)  # refuse to start on an invalid policy, before connecting
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s hvnet-agent %(levelname)s %(message)s"))
    root = logging.getLogger("hvnet")
    root.handlers[:] = [handler]
    root.propagate = False
    root.setLevel(logging.DEBUG if args.verbose > 1 else logging.INFO)
    columns = {t: [c for c in cols if c != "statistics"] for t, cols in COLUMNS.items()}
    host = host_of(args)
    conn = api.connect(host, timeout=args.timeout, columns=columns)
    agent = Agent(conn, host, path, tick=args.tick)
    if args.policing:
        agent.engine.force_policing = args.policing
    agent.install_signal_handlers()
    agent.run()
    conn.close()
    return EXIT_OK


# -- parser ----------------------------------------------------------------------------


def _commit_timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 5 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"must be 5..86400 seconds, not {value:g}")
    return value


def _vlan_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"VLAN tag must be an integer 0..4094, not {text!r}") from None


def register(sub: Any) -> None:
    """Add the policy commands to the top-level subparsers."""

    def common(p: argparse.ArgumentParser, *, dry_run: bool = True) -> None:
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if dry_run:
            p.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")

    def policing(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--policing", choices=("auto", "tc", "meter"), help="force the ingress policing mechanism (default: auto)"
        )

    p = sub.add_parser("plan", help="show what applying a policy would change (before -> after); changes nothing")
    p.add_argument("file", nargs="?", metavar="FILE", help=f"policy YAML (default $HVNET_POLICY or {DEFAULT_POLICY})")
    common(p, dry_run=False)
    policing(p)
    p.set_defaults(func=cmd_plan)

    a = sub.add_parser("apply", help="apply a policy: one transaction, meters, verified, audited")
    a.add_argument("file", nargs="?", metavar="FILE", help=f"policy YAML (default $HVNET_POLICY or {DEFAULT_POLICY})")
    common(a)
    policing(a)
    a.add_argument("--no-verify", action="store_true", help="skip the post-apply check of ovs-vswitchd's state")
    a.add_argument("--no-wait", action="store_true", help="do not wait for ovs-vswitchd (implies --no-verify)")
    a.add_argument(
        "--no-commit", action="store_true", help="roll back automatically unless 'hvnet commit' comes in time"
    )
    a.add_argument(
        "--timeout", dest="commit_timeout", type=_commit_timeout, default=60.0, metavar="S",
        help="with --no-commit: seconds before the automatic rollback (default 60)",
    )  # fmt: skip
    a.set_defaults(func=cmd_apply)

    v = sub.add_parser("verify", help="report drift between the switch and a policy (exit 1 on drift)")
    v.add_argument("file", nargs="?", metavar="FILE", help=f"policy YAML (default $HVNET_POLICY or {DEFAULT_POLICY})")
    common(v, dry_run=False)
    policing(v)
    v.set_defaults(func=cmd_verify)

    e = sub.add_parser("export", help="write the current VIF and mirror settings as a policy file")
    e.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    e.add_argument("--by", choices=("mac", "port"), default="mac", help="select VIFs by VM MAC (default) or port")
    e.add_argument("--json", action="store_true", help="the policy as JSON")
    e.set_defaults(func=cmd_export)

    c = sub.add_parser("commit", help="keep a change applied with --no-commit")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=cmd_commit)

    r = sub.add_parser("rollback", help="undo the pending --no-commit change, else the last apply")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--pending", help=argparse.SUPPRESS)
    r.add_argument("--at", help=argparse.SUPPRESS)
    r.set_defaults(func=cmd_rollback)

    ag = sub.add_parser("agent", help="keep the policy in force as VIFs come and go (foreground)")
    ag.add_argument("--policy", metavar="FILE", help=f"policy YAML (default $HVNET_POLICY or {DEFAULT_POLICY})")
    policing(ag)
    ag.add_argument("--tick", type=float, default=2.0, help=argparse.SUPPRESS)
    ag.set_defaults(func=cmd_agent)

    vif = sub.add_parser("vif", help="set a VIF's VLAN (mode, tag, trunks)")
    vsub = vif.add_subparsers(dest="vif_command", metavar="ACTION", required=True, parser_class=type(vif))
    vs = vsub.add_parser("set", help="set VLAN mode/tag/trunks of one VIF (port, vm:NAME, mac:MAC)")
    vs.add_argument("vif", metavar="VIF")
    vs.add_argument("--tag", type=_vlan_arg, metavar="N", help="VLAN tag 0..4094 (access or native VLAN)")
    vs.add_argument("--trunks", metavar="LIST", help="trunked VLANs, e.g. 10,20-30, or 'all'")
    vs.add_argument("--vlan-mode", choices=("access", "trunk", "native-tagged", "native-untagged"))
    common(vs)
    vs.set_defaults(func=cmd_vif_set)

    q = sub.add_parser("qos", help="ingress policing and egress shaping of a VIF")
    qsub = q.add_subparsers(dest="qos_command", metavar="ACTION", required=True, parser_class=type(q))
    qs = qsub.add_parser("set", help="set ingress policing and/or egress shaping (kbit/s, kbit)")
    qs.add_argument("vif", metavar="VIF")
    qs.add_argument("--ingress-rate", metavar="KBPS", help="what the VM may send, kbit/s (or '10mbit')")
    qs.add_argument("--ingress-burst", metavar="KB", help="policing burst in kbit (default 80%% of the rate)")
    qs.add_argument("--egress-rate", metavar="KBPS", help="what the VM may receive, kbit/s")
    qs.add_argument("--egress-burst", metavar="KB", help="shaping burst in kbit")
    qs.add_argument("--mechanism", choices=("auto", "tc", "meter"), default="auto", help="policing mechanism")
    common(qs)
    qs.set_defaults(func=cmd_qos_set)
    qc = qsub.add_parser("clear", help="remove ingress policing and egress shaping from a VIF")
    qc.add_argument("vif", metavar="VIF")
    common(qc)
    qc.set_defaults(func=cmd_qos_clear)

    m = sub.add_parser("mirror", help="port mirrors: add, del, list (with statistics)")
    msub = m.add_subparsers(dest="mirror_command", metavar="ACTION", required=True, parser_class=type(m))
    ma = msub.add_parser("add", help="add a mirror")
    ma.add_argument("name", metavar="NAME")
    ma.add_argument("--bridge", required=True, metavar="BR")
    ma.add_argument("--src", nargs="+", metavar="VIF", help="mirror what these ports receive from their VMs")
    ma.add_argument("--dst", nargs="+", metavar="VIF", help="mirror what these ports send to their VMs")
    ma.add_argument("--vlan", metavar="LIST", help="only these VLANs, e.g. 10,20-30")
    ma.add_argument("--all", action="store_true", help="select every port")
    ma.add_argument("--output-port", metavar="PORT")
    ma.add_argument("--output-vlan", type=_vlan_arg, metavar="N", help="RSPAN VLAN")
    ma.add_argument("--output-gre", metavar="IP", help="remote collector over GRE (hvnet creates the tunnel port)")
    ma.add_argument("--output-erspan", metavar="IP", help="remote collector over ERSPAN v1")
    ma.add_argument("--key", type=int, metavar="K", help="tunnel key for GRE/ERSPAN")
    ma.add_argument("--snaplen", type=int, metavar="BYTES", help="keep only the first BYTES of each copy")
    ma.add_argument("--filter", metavar="MATCH", help="OpenFlow match to filter copies (where OVS supports it)")
    ma.add_argument(
        "--allow-isolation-exception", action="store_true", help="allow a VM's interface as the output port"
    )
    common(ma)
    ma.set_defaults(func=cmd_mirror_add)
    md = msub.add_parser("del", help="delete a mirror (and the tunnel port hvnet made for it)")
    md.add_argument("name", metavar="NAME")
    md.add_argument("--bridge", metavar="BR")
    common(md)
    md.set_defaults(func=cmd_mirror_del)
    ml = msub.add_parser("list", help="list mirrors with their statistics")
    ml.add_argument("--json", action="store_true", help="machine-readable output")
    ml.set_defaults(func=cmd_mirror_list)
