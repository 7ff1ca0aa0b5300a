"""The policy commands' parser: ``plan | apply | verify | export | commit | rollback | agent | vif | qos | mirror``.

Apart from :mod:`appliance.cli.policy` (the commands) so that building
``hvnet``'s parser loads no policy code: a command's module is imported when
it runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from appliance.cli.common import add_hosts_option, lazy
from appliance.switch.host import DEFAULT_POLICY_FILE as DEFAULT_POLICY


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
    add_hosts_option(p)
    p.set_defaults(func=lazy("appliance.cli.policy", "cmd_plan"))

    a = sub.add_parser("apply", help="apply a policy: one transaction, meters, verified, audited")
    a.add_argument("file", nargs="?", metavar="FILE", help=f"policy YAML (default $HVNET_POLICY or {DEFAULT_POLICY})")
    common(a)
    policing(a)
    a.add_argument("--no-verify", action="store_true", help="skip the post-apply check of ovs-vswitchd's state")
    a.add_argument("--no-wait", action="store_true", help="do not wait for ovs-vswitchd (implies --no-verify)")
    a.add_argument(
        "--no-commit", action="store_true",
        help="roll back automatically unless 'hvnet commit' comes in time (with --host/--hosts the undo is armed "
        "on the host itself, so a change that cuts SSH is still undone)",
    )  # fmt: skip
    a.add_argument(
        "--timeout", dest="commit_timeout", type=_commit_timeout, default=60.0, metavar="S",
        help="with --no-commit: seconds before the automatic rollback (default 60)",
    )  # fmt: skip
    add_hosts_option(a)
    a.set_defaults(func=lazy("appliance.cli.policy", "cmd_apply"))

    v = sub.add_parser("verify", help="report drift between the switch and a policy (exit 1 on drift)")
    v.add_argument("file", nargs="?", metavar="FILE", help=f"policy YAML (default $HVNET_POLICY or {DEFAULT_POLICY})")
    common(v, dry_run=False)
    policing(v)
    add_hosts_option(v)
    v.set_defaults(func=lazy("appliance.cli.policy", "cmd_verify"))

    e = sub.add_parser("export", help="write the current VIF and mirror settings as a policy file")
    e.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    e.add_argument("--by", choices=("mac", "port"), default="mac", help="select VIFs by VM MAC (default) or port")
    e.add_argument("--json", action="store_true", help="the policy as JSON")
    e.set_defaults(func=lazy("appliance.cli.policy", "cmd_export"))

    c = sub.add_parser("commit", help="keep a change applied with --no-commit")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=lazy("appliance.cli.policy", "cmd_commit"))

    r = sub.add_parser("rollback", help="undo the pending --no-commit change, else the last apply")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--pending", help=argparse.SUPPRESS)
    r.add_argument("--at", help=argparse.SUPPRESS)
    r.set_defaults(func=lazy("appliance.cli.policy", "cmd_rollback"))

    ag = sub.add_parser("agent", help="keep the policy in force as VIFs come and go (foreground)")
    ag.add_argument("--policy", metavar="FILE", help=f"policy YAML (default $HVNET_POLICY or {DEFAULT_POLICY})")
    policing(ag)
    ag.add_argument("--tick", type=float, default=2.0, help=argparse.SUPPRESS)
    ag.add_argument(
        "--prepare", action="store_true",
        help="probe what this kernel enforces (tc police) and cache it for the boot, then exit "
        "(the unit's privileged ExecStartPre: the agent's sandbox cannot make the probe's namespace)",
    )  # fmt: skip
    ag.set_defaults(func=lazy("appliance.cli.policy", "cmd_agent"))

    vif = sub.add_parser("vif", help="show a VIF (VLAN, limits in hvnet's, xe's and libvirt's units), set its VLAN")
    vsub = vif.add_subparsers(dest="vif_command", metavar="ACTION", required=True, parser_class=type(vif))
    vs = vsub.add_parser("set", help="set VLAN mode/tag/trunks of one VIF (port, vm:NAME, mac:MAC)")
    vs.add_argument("vif", metavar="VIF")
    vs.add_argument("--tag", type=_vlan_arg, metavar="N", help="VLAN tag 0..4094 (access or native VLAN)")
    vs.add_argument("--trunks", metavar="LIST", help="trunked VLANs, e.g. 10,20-30, or 'all'")
    vs.add_argument("--vlan-mode", choices=("access", "trunk", "native-tagged", "native-untagged"))
    common(vs)
    vs.set_defaults(func=lazy("appliance.cli.policy", "cmd_vif_set"))
    vw = vsub.add_parser(
        "show", help="one VIF (port, vm:NAME, mac:MAC): its VLAN, link and limits, with the same limits in xe's "
        "qos_algorithm_params:kbps (kilobytes/s) and libvirt's <bandwidth> (average kB/s, burst KiB)",
    )  # fmt: skip
    vw.add_argument("vif", metavar="VIF")
    vw.add_argument("--json", action="store_true", help="machine-readable output (units in key names)")
    vw.set_defaults(func=lazy("appliance.cli.limits", "cmd_vif_show"))

    q = sub.add_parser("qos", help="ingress policing and egress shaping of a VIF: set, clear, show")
    qsub = q.add_subparsers(dest="qos_command", metavar="ACTION", required=True, parser_class=type(q))
    qs = qsub.add_parser(
        "set", help="set ingress policing and/or egress shaping; a bare number is kbit/s (rates) or kbit (bursts)",
        epilog="RATE: 10240 (kbit/s), 10mbit, 10240kbit, 1250KB/s, 1220KiB/s (k/M/G 1000-based, Ki/Mi/Gi 1024-based, "
        "B bytes, bit bits, '/s' optional); SIZE the same without '/s'. 'kbps' and 'mbps' are refused: tc and "
        "XenServer read them as bytes/s, OVS as bits/s.",
    )  # fmt: skip
    qs.add_argument("vif", metavar="VIF")
    qs.add_argument("--ingress-rate", metavar="RATE", help="what the VM may send (kbit/s, or '10mbit', '1250KB/s')")
    qs.add_argument("--ingress-burst", metavar="SIZE", help="policing burst (kbit, or '1mbit', '125KB'; default "
                    "80%% of the rate)")  # fmt: skip
    qs.add_argument("--egress-rate", metavar="RATE", help="what the VM may receive (kbit/s, or '10mbit')")
    qs.add_argument("--egress-burst", metavar="SIZE", help="shaping burst (kbit, or '1mbit', '125KB')")
    qs.add_argument("--mechanism", choices=("auto", "tc", "meter"), default="auto", help="policing mechanism")
    common(qs)
    qs.set_defaults(func=lazy("appliance.cli.policy", "cmd_qos_set"))
    qc = qsub.add_parser("clear", help="remove ingress policing and egress shaping from a VIF")
    qc.add_argument("vif", metavar="VIF")
    common(qc)
    qc.set_defaults(func=lazy("appliance.cli.policy", "cmd_qos_clear"))
    qw = qsub.add_parser("show", help="every VIF's ingress policing and egress shaping as the switch holds them")
    qw.add_argument("vif", nargs="?", metavar="VIF", help="only this VIF (port, vm:NAME, mac:MAC)")
    qw.add_argument("--json", action="store_true", help="machine-readable output (units in key names)")
    qw.set_defaults(func=lazy("appliance.cli.limits", "cmd_qos_show"))

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
    ma.add_argument(
        "--may-exist", action="store_true",
        help="a mirror of that name with these settings is success, nothing changed (as ovs-vsctl --may-exist)",
    )  # fmt: skip
    common(ma)
    ma.set_defaults(func=lazy("appliance.cli.policy", "cmd_mirror_add"))
    md = msub.add_parser("del", help="delete a mirror (and the tunnel port hvnet made for it)")
    md.add_argument("name", metavar="NAME")
    md.add_argument("--bridge", metavar="BR")
    md.add_argument("--if-exists", action="store_true", help="no such mirror is success, nothing changed")
    common(md)
    md.set_defaults(func=lazy("appliance.cli.policy", "cmd_mirror_del"))
    ml = msub.add_parser("list", help="list mirrors with their statistics")
    ml.add_argument("--json", action="store_true", help="machine-readable output")
    ml.set_defaults(func=lazy("appliance.cli.policy", "cmd_mirror_list"))

    register_sampling(sub)


def register_sampling(sub: Any) -> None:
    """Add ``sflow`` and ``ipfix`` to the top-level subparsers (commands in :mod:`.cli_policy_sampling`)."""
    helps = {
        "sflow": "sFlow packet sampling and counter polling of a bridge",
        "ipfix": "IPFIX flow export of a bridge (bridge-wide sampling)",
    }
    for kind, title in (("sflow", "sFlow"), ("ipfix", "IPFIX")):
        p = sub.add_parser(kind, help=helps[kind])
        psub = p.add_subparsers(dest=f"{kind}_command", metavar="ACTION", required=True, parser_class=type(p))
        s = psub.add_parser("set", help=f"send {title} from BRIDGE to collectors (replaces its {title} settings)")
        s.add_argument("bridge", metavar="BRIDGE")
        s.add_argument("--target", action="append", required=True, metavar="HOST:PORT",
                       help="a collector (repeat for several): IPv4:port, [IPv6]:port or name:port")  # fmt: skip
        s.add_argument("--sampling", metavar="N", help="sample 1 in N packets (OVS default 400)")
        if kind == "sflow":
            s.add_argument("--polling", metavar="S", help="seconds between counter samples (OVS default 30)")
            s.add_argument("--header", metavar="B", help="bytes of each sampled packet (OVS default 128)")
            s.add_argument("--agent", metavar="IF|IP", help="the agent address collectors see (an interface or IP)")
        else:
            s.add_argument("--obs-domain-id", metavar="N", help="IPFIX observation domain id")
            s.add_argument("--obs-point-id", metavar="N", help="IPFIX observation point id")
            s.add_argument("--cache-active-timeout", metavar="S", help="flow cache active timeout, 0 = no cache")
            s.add_argument("--cache-max-flows", metavar="N", help="flows the cache holds, 0 = no cache")
        s.add_argument("--json", action="store_true", help="machine-readable output")
        s.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")
        s.set_defaults(func=lazy("appliance.cli.sampling", "cmd_set"), kind=kind)
        c = psub.add_parser("clear", help=f"take {title} away from BRIDGE")
        c.add_argument("bridge", metavar="BRIDGE")
        c.add_argument("--json", action="store_true", help="machine-readable output")
        c.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")
        c.set_defaults(func=lazy("appliance.cli.sampling", "cmd_clear"), kind=kind)
        w = psub.add_parser("show", help=f"each bridge's {title} settings as the switch holds them")
        w.add_argument("bridge", nargs="?", metavar="BRIDGE", help="only this bridge")
        w.add_argument("--json", action="store_true", help="machine-readable output (units in key names)")
        w.set_defaults(func=lazy("appliance.cli.limits", "cmd_sampling_show"), kind=kind)
