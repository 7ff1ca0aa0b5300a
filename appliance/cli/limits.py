"""``hvnet vif show VIF``, ``hvnet qos show [VIF]``, ``hvnet sflow show [BRIDGE]``, ``hvnet ipfix show [BRIDGE]``.

The read side of ``vif set``, ``qos set`` and ``sflow``/``ipfix set``: what the switch holds, from one
read (:mod:`appliance.services.limits`), as text or ``--json``.  Limits are shown in kbit/s and kbit,
the unit hvnet and OVS take, and ``vif show`` gives the same limit in xe's and libvirt's units.
"""

from __future__ import annotations

import argparse
from typing import Any

from appliance.core import documents, render
from appliance.core.errors import EXIT_OK
from appliance.frontdoor.hosts import host_of
from appliance.services import limits as svc
from appliance.services.limits import Limits


def _ingress(lim: Limits) -> str:
    if lim.ingress_rate_kbit is None:
        return "-"
    burst = f"{lim.ingress_burst_kbit} kbit" + (" (OVS default)" if lim.ingress_burst_is_default else "")
    return f"{lim.ingress_rate_kbit} kbit/s burst {burst} ({lim.ingress_mechanism})"


def _egress(lim: Limits) -> str:
    if lim.egress_qos_type is None:
        return "-"
    if lim.egress_rate_kbit is None:
        return f"QoS {lim.egress_qos_type} (no max-rate hvnet reads)"
    burst = f" burst {lim.egress_burst_bits / 1000:g} kbit" if lim.egress_burst_bits else ""
    return f"max {lim.egress_rate_kbit:g} kbit/s{burst}" + (
        "" if lim.egress_qos_type == "linux-htb" else f" ({lim.egress_qos_type})"
    )


def _number(value: float) -> str:
    """A value another tool takes as an integer: exact when it is one, else rounded and marked ``~``."""
    return f"{value:g}" if value == int(value) else f"~{round(value)}"


def equivalent_lines(lim: Limits) -> list[str]:
    """The same limits in XenServer's and libvirt's units, one line each (``hvnet vif show``)."""
    eq = lim.equivalents()
    lines = []
    if eq["xe"]:
        kbps = eq["xe"]["qos_algorithm_params:kbps"]
        lines.append(f"  xe:       qos_algorithm_type=ratelimit qos_algorithm_params:kbps={_number(kbps)} "
                     "(kilobytes/s of what the VM sends; xe sets no burst, nor a receive limit)")  # fmt: skip
    for direction, what in (("outbound", "what the VM sends"), ("inbound", "what the VM receives")):
        attrs = (eq["libvirt"] or {}).get(direction)
        if attrs:
            text = " ".join(f"{k}='{_number(v)}'" for k, v in attrs.items())
            lines.append(f"  libvirt:  <bandwidth><{direction} {text}/> (average kB/s, burst KiB: {what})")
    return lines


def cmd_qos_show(args: argparse.Namespace) -> int:
    inv = svc.read(host_of(args), timeout=args.timeout)
    shown = svc.qos_view(inv, args.vif)
    if args.json:
        render.print_json(qos_json(shown))
        return EXIT_OK
    rows = [[lim.bridge, lim.port, lim.vm or "-", _ingress(lim), _egress(lim)] for lim in shown
            if lim.limited or args.vif]  # fmt: skip
    if rows:
        print(render.table(["BRIDGE", "PORT", "VM", "INGRESS (VM sends)", "EGRESS (VM receives)"], rows))
    unlimited = sum(not lim.limited for lim in shown)
    if unlimited and not args.vif:
        print(f"{'no VIF has a limit: ' if not rows else ''}{unlimited} VIF(s) without ingress policing or egress "
              "shaping")  # fmt: skip
    elif not shown:
        print("no VIFs on this switch")
    return EXIT_OK


def cmd_vif_show(args: argparse.Namespace) -> int:
    inv = svc.read(host_of(args), timeout=args.timeout)
    vif, lim = svc.vif_view(inv, args.vif)
    if args.json:
        render.print_json(vif_json(vif, lim))
        return EXIT_OK
    print(render.lines(_vif_lines(vif, lim)))
    return EXIT_OK


def qos_json(shown: list[Limits]) -> dict[str, Any]:
    """``hvnet qos show --json``: document ``hvnet.qos.show``."""
    return documents.QOS_SHOW.stamp({"vifs": [lim.to_json() for lim in shown]})


def vif_json(vif: Any, lim: Limits) -> dict[str, Any]:
    """``hvnet vif show --json``: document ``hvnet.vif.show``, the limits and where the VIF is."""
    return documents.VIF_SHOW.stamp({"vif": {**lim.to_json(), "interface": vif.interface, "ofport": vif.ofport,
                                             "vm_uuid": vif.vm_uuid, "link_state": vif.link_state, "mtu": vif.mtu,
                                             "mirrors": vif.mirrors}})  # fmt: skip


def sampling_json(kind: str, shown: list[svc.Sampling]) -> dict[str, Any]:
    """``hvnet sflow show --json`` / ``ipfix show --json``: document ``hvnet.sflow.show`` / ``hvnet.ipfix.show``."""
    doc = documents.SFLOW_SHOW if kind == "sflow" else documents.IPFIX_SHOW
    return doc.stamp({"kind": kind, "bridges": [s.to_json() for s in shown]})


def _vif_lines(vif: Any, lim: Limits) -> list[str]:
    alias = f" (also {', '.join(lim.alias_ports)})" if lim.alias_ports else ""
    owner = f"VM {lim.vm or vif.vm_uuid or '-'}" if vif.is_vif else "not a VM's interface"
    lines = [
        f"{lim.port}{alias} on {lim.bridge}: {owner}, MAC {lim.mac or '-'}",
        f"  VLAN:     {lim.vlan}",
        f"  link:     {vif.link_state or '-'}, MTU {vif.mtu or '-'}, ofport {vif.ofport}",
        f"  ingress:  {_ingress(lim)}  (what the VM may send)",
        f"  egress:   {_egress(lim)}  (what the VM may receive)",
    ]
    return lines + equivalent_lines(lim)


def cmd_sampling_show(args: argparse.Namespace) -> int:
    inv = svc.read(host_of(args), timeout=args.timeout)
    shown = svc.sampling_view(inv, args.kind, args.bridge)
    if args.json:
        render.print_json(sampling_json(args.kind, shown))
        return EXIT_OK
    rows = [[s.bridge, s.text, "-" if s.settings is None else (s.owner or "not hvnet's")] for s in shown]
    print(render.table(["BRIDGE", "SETTINGS", "OWNER"], rows) if rows else "no bridges on this switch")
    return EXIT_OK
