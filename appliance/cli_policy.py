"""``hvnet plan | apply | verify | export | commit | rollback | vif | qos | mirror``.

The declarative commands take a policy file; the imperative ones build the
same policy fragment from their arguments, so both go through one planner and
one transaction path.  Every command has ``--json``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from . import api, render
from .errors import EXIT_FAILED, EXIT_OK, ConfigError, HvnetError, Problem, UsageError
from .frontdoor import host_of
from .policy import (
    COLUMNS,
    DEFAULT_POLICY,
    REMOVE,
    ApplyResult,
    MirrorRule,
    Plan,
    Policy,
    PolicyEngine,
    Selector,
    VifRule,
    describe,
    export,
    intents,
    journal,
    load,
    require_one,
)
from .policy.engine import change_json
from .policy.fields import FieldError


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
        plan = eng.plan(policy)
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
        if args.no_commit and eng.journal.load_pending():
            raise UsageError("an earlier --no-commit apply is still pending", hint="hvnet commit, or hvnet rollback")
        result = eng.apply(policy, dry_run=args.dry_run, verify=not args.no_verify, wait=not args.no_wait)
        if args.no_commit and result.status == "applied" and result.record_id:
            _arm_watcher(eng, result, args.commit_timeout)
    return _finish(args, result)


def _arm_watcher(eng: PolicyEngine, result: ApplyResult, timeout: float) -> None:
    record = eng.journal.load_last()
    assert record is not None and record["id"] == result.record_id
    deadline = time.time() + timeout
    eng.journal.save_pending(record, deadline, None)
    log_path = eng.journal.state_dir / "rollback-watcher.log"
    with open(log_path, "a") as log_file:
        watcher = subprocess.Popen(
            [sys.executable, "-m", "appliance", "--db", eng.remote, "rollback", "--pending", record["id"],
             "--at", f"{deadline:.3f}"],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, start_new_session=True,
        )  # fmt: skip
    eng.journal.save_pending(record, deadline, watcher.pid)
    result.plan.warnings.append(
        f"not committed: rolls back automatically at {datetime.fromtimestamp(deadline):%H:%M:%S} "
        f"({timeout:g} s) unless 'hvnet commit' runs first"
    )


def cmd_verify(args: argparse.Namespace) -> int:
    policy = load(_policy_file(args))
    with _engine(args) as eng:
        plan = eng.plan(policy)
        of_drift = eng.openflow_drift()
    drift = [
        {"target": c.target, "setting": c.kind, "expected": c.describe(c.after), "found": c.describe(c.before)}
        for c in plan.changes
    ]
    if of_drift:
        drift.append({"target": "OpenFlow", "setting": "meters", "expected": "as recorded in OVSDB", "found": "differ"})
    if args.json:
        render.print_json({"in_sync": not drift, "drift": drift, "warnings": plan.warnings})
    elif drift:
        print(render.table(["TARGET", "SETTING", "EXPECTED", "FOUND"], [list(d.values()) for d in drift]))
        print(f"drift: {len(drift)} setting(s) differ from {_policy_file(args)}")
    else:
        print(f"in sync: the switch matches {_policy_file(args)}")
    return EXIT_FAILED if drift else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        state = eng.snapshot()
    header = f"# hvnet policy exported {datetime.now():%Y-%m-%d %H:%M:%S} from {eng.remote}\n"
    if args.json:
        render.print_json(export.to_policy(state, by=args.by))
        return EXIT_OK
    text = export.to_yaml(state, by=args.by, header=header)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out} ({len(state.vifs())} VIFs, {len(state.mirrors)} mirrors)")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_commit(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        pending = eng.journal.load_pending()
        if pending is None:
            msg = "nothing to commit: no --no-commit apply is pending"
            _out(args, {"committed": False, "message": msg}, msg)
            return EXIT_OK
        if journal.seconds_left(pending) <= 0 or not eng.journal.clear_pending(pending["id"]):
            raise HvnetError("too late: the pending change has already been rolled back (or is being)")
        _stop_watcher(pending)
        eng.journal.audit(_command_line(), [], f"committed {pending['id']}")
    msg = f"committed {pending['id']} ({len(pending['changes'])} change(s)); automatic rollback cancelled"
    _out(args, {"committed": True, "id": pending["id"]}, msg)
    return EXIT_OK


def _stop_watcher(pending: dict[str, Any]) -> None:
    pid = pending.get("watcher_pid")
    if not pid:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if pending["id"].encode() in cmdline:  # only the watcher hvnet started for this record
        try:
            os.kill(int(pid), 15)
        except ProcessLookupError:
            pass


def _out(args: argparse.Namespace, obj: dict[str, Any], text: str) -> None:
    if args.json:
        render.print_json(obj)
    else:
        print(text)


def cmd_rollback(args: argparse.Namespace) -> int:
    if args.pending:
        return _watch_and_rollback(args)
    with _engine(args) as eng:
        pending = eng.journal.load_pending()
        if pending is not None:
            if not eng.journal.clear_pending(pending["id"]):
                raise HvnetError("the pending change is being rolled back already")
            _stop_watcher(pending)
            record = pending
        else:
            record = eng.journal.load_last()
            if record is None:
                raise HvnetError("nothing to roll back: no apply is recorded for this switch")
        result = eng.apply_changes(
            [c.inverse() for c in reversed(journal.record_changes(record))], label=f"hvnet rollback {record['id']}"
        )
        eng.journal.mark_rolled_back()
    return _finish(args, result)


def _watch_and_rollback(args: argparse.Namespace) -> int:
    """The detached watcher of a ``--no-commit`` apply."""
    deadline = float(args.at)
    while time.time() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.time())))
    with _engine(args) as eng:
        pending = eng.journal.load_pending()
        if pending is None or pending["id"] != args.pending or not eng.journal.clear_pending(args.pending):
            return EXIT_OK  # committed (or rolled back by hand) in time
        eng.command = f"hvnet (automatic rollback of {args.pending}: not committed in time)"
        result = eng.apply_changes(
            [c.inverse() for c in reversed(journal.record_changes(pending))], label="hvnet automatic rollback"
        )
        eng.journal.mark_rolled_back()
    print(format_result(result))
    return EXIT_OK if result.ok else EXIT_FAILED


# -- imperative ----------------------------------------------------------------------


def _cli_problem(field: str, message: str) -> ConfigError:
    return ConfigError([Problem("command line", None, field, message)])


def cmd_vif_set(args: argparse.Namespace) -> int:
    if args.tag is None and args.trunks is None and args.vlan_mode is None:
        raise UsageError("give at least one of --tag, --trunks, --vlan-mode")
    with _engine(args) as eng:
        state = eng.snapshot()
        port = require_one(state, args.vif, "VIF")
        try:
            vlan = intents.vlan_change(state.ports[port].vlan.effective(), args.vlan_mode, args.tag, args.trunks)
        except FieldError as exc:
            field = {"mode": "--vlan-mode", "tag": "--tag", "trunks": "--trunks"}.get(exc.field, "--vlan-mode")
            raise _cli_problem(field, str(exc)) from None
        policy = Policy(vifs=[VifRule(Selector("port", port), vlan=vlan)])
        return _finish(args, eng.apply(policy, dry_run=args.dry_run))


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
        port = require_one(eng.snapshot(), args.vif, "VIF")
        rule.selector = Selector("port", port)
        return _finish(args, eng.apply(Policy(vifs=[rule]), dry_run=args.dry_run))


def cmd_qos_clear(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        port = require_one(eng.snapshot(), args.vif, "VIF")
        rule = VifRule(Selector("port", port), ingress=REMOVE, egress=REMOVE)
        return _finish(args, eng.apply(Policy(vifs=[rule]), dry_run=args.dry_run))


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
        state = eng.snapshot()
        if (args.bridge, args.name) in state.mirrors:
            raise UsageError(f"mirror {args.name} already exists on {args.bridge}", hint="hvnet mirror del it first")
        policy = Policy(mirrors=[rule], bridges={args.bridge: ("--bridge",)})
        return _finish(args, eng.apply(policy, dry_run=args.dry_run))


def cmd_mirror_del(args: argparse.Namespace) -> int:
    with _engine(args) as eng:
        state = eng.snapshot()
        found = [br for (br, name) in state.mirrors if name == args.name and (not args.bridge or br == args.bridge)]
        if not found:
            raise UsageError(f"no mirror named {args.name}" + (f" on {args.bridge}" if args.bridge else ""))
        if len(found) > 1:
            raise UsageError(f"mirror {args.name} exists on {', '.join(found)}", hint="give --bridge")
        policy = Policy(mirrors=[MirrorRule(found[0], args.name, remove=True)])
        return _finish(args, eng.apply(policy, dry_run=args.dry_run))


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
