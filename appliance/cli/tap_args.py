"""The ``hvnet tap`` verbs' arguments (their work is :mod:`appliance.cli.tap`, loaded when one runs)."""

from __future__ import annotations

from typing import Any

from appliance.cli.common import lazy

# The policy model's words (appliance.policy.plan.model), here so that building the parser
# loads no policy code; a test checks they agree.
TAP_DIRECTIONS = ("in", "out", "both")
TAP_METHODS = ("flows", "group")
# The match keys --src-mac ... --dst-port set (a TAP's match in the policy model).
MATCH_FLAGS = ("src_mac", "dst_mac", "src_ip", "dst_ip", "vlan", "protocol", "src_port", "dst_port")


def register(sub: Any) -> None:
    t = sub.add_parser("tap", help="flow TAPs: copy matching traffic of VIFs to a monitor (add, del, list)")
    tsub = t.add_subparsers(dest="tap_command", metavar="ACTION", required=True, parser_class=type(t))
    ta = tsub.add_parser("add", help="add a TAP (policy: bridges.BR.taps.NAME)")
    ta.add_argument("name", metavar="NAME")
    ta.add_argument("--bridge", required=True, metavar="BR")
    ta.add_argument("--vif", nargs="+", required=True, metavar="VIF", help="the VIFs tapped (vif1.0, vm:VM1, ...)")
    ta.add_argument("--direction", choices=TAP_DIRECTIONS, default="both", help="in: what the VM sends (default both)")
    ta.add_argument("--method", choices=TAP_METHODS, default="flows", help="flows, or an OpenFlow group of type ALL")
    for flag in MATCH_FLAGS:
        kind = int if flag in ("vlan", "src_port", "dst_port") else str
        ta.add_argument("--" + flag.replace("_", "-"), type=kind, metavar=flag.split("_")[-1].upper())
    ta.add_argument("--output-port", metavar="PORT")
    ta.add_argument("--output-gre", metavar="IP", help="remote collector over GRE (hvnet creates the tunnel port)")
    ta.add_argument("--output-erspan", metavar="IP", help="remote collector over ERSPAN v1")
    ta.add_argument("--key", type=int, metavar="K", help="tunnel key for GRE/ERSPAN")
    ta.add_argument("--sampling", metavar="N", help="refused: OVS cannot sample a TAP's copies (says why)")
    ta.add_argument("--allow-isolation-exception", action="store_true", help="allow a VM's interface as output")
    ta.add_argument("--json", action="store_true", help="machine-readable output")
    ta.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")
    ta.set_defaults(func=lazy("appliance.cli.tap", "cmd_tap_add"))
    td = tsub.add_parser("del", help="delete a TAP (its flows, group and any tunnel port hvnet made)")
    td.add_argument("name", metavar="NAME")
    td.add_argument("--bridge", metavar="BR")
    td.add_argument("--json", action="store_true", help="machine-readable output")
    td.add_argument("--dry-run", action="store_true", help="plan and print, change nothing")
    td.set_defaults(func=lazy("appliance.cli.tap", "cmd_tap_del"))
    tl = tsub.add_parser("list", help="list TAPs with the packets and bytes their flows matched")
    tl.add_argument("--json", action="store_true", help="machine-readable output")
    tl.set_defaults(func=lazy("appliance.cli.tap", "cmd_tap_list"))
