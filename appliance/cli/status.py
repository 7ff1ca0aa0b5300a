"""``hvnet status``: the host's bridges and VIFs, once (or each of ``--hosts``), as text or JSON.

It runs on every hypervisor and is called by scripts, often: this module
loads the snapshot's request side, and the inventory's read side while the server
answers; OpenFlow is loaded only when the switch has a TAP to count, the pool's and
the fleet's modules only with ``--pool`` or ``--hosts``.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING

from appliance.core import render
from appliance.core.errors import EXIT_OK, HvnetError
from appliance.frontdoor.hosts import host_of
from appliance.services import status as status_svc

# The inventory's code is loaded while the server answers the read (see appliance.services.status).
if TYPE_CHECKING:
    from appliance.services.inventory import Inventory, Vif
    from appliance.switch.host import Host


def _ingress_text(v: Vif) -> str:
    if not v.ingress_policing_rate_kbps:
        return "-"
    burst = v.ingress_policing_burst_kbit
    how = f" ({v.ingress_mechanism})" if v.ingress_mechanism else ""
    return f"{v.ingress_policing_rate_kbps} kbit/s burst {burst if burst else '8000 (default)'} kbit{how}"


def _vm_text(v: Vif) -> str:
    """``web-01 (running)``: the name, and the domain's state when libvirt said it."""
    name = v.vm_name or (v.vm_uuid[:8] if v.vm_uuid else "-")
    return f"{name} ({v.vm_state})" if v.vm_state else name


def _traffic_cells(v: Vif, with_rates: bool) -> list[str]:
    if with_rates:
        if v.rates is None:
            return ["-", "-"]
        return [render.si(v.rates.rx_bps, "bit/s"), render.si(v.rates.tx_bps, "bit/s")]
    return [render.count(v.counters.rx_packets) + " pkt", render.count(v.counters.tx_packets) + " pkt"]


def _platform_text(p: dict | None) -> str:
    """``  XCP-ng 8.2.1 dom0`` after the host line when hvnet runs against a dom0's switch; else nothing."""
    if not p or not p.get("dom0"):
        return ""
    return "  " + render.terminal(" ".join(x for x in (p.get("product"), p.get("version"), "dom0") if x))


def format_status(inv: Inventory, *, all_ports: bool, with_rates: bool) -> str:
    h = inv.host
    dps = ", ".join(f"{b.name} ({b.datapath_type})" for b in inv.bridges) or "none"
    lines = [
        f"host {h.hostname}  OVS {h.ovs_version or '?'}  db {h.db_target}" + _platform_text(h.platform),
        f"bridges: {dps}",
        "",
    ]
    vifs = [v for v in inv.vifs if all_ports or v.is_vif]
    rx_head, tx_head = ("RX(VM sends)", "TX(to VM)") if with_rates else ("RX", "TX")
    rows = []
    for v in vifs:
        rows.append(
            [
                _vm_text(v),
                v.port + ("+" + ",".join(v.alias_ports) if v.alias_ports else ""),
                v.mac or "-",
                v.vlan_summary(),
                _ingress_text(v),
                render.kbps(v.egress_max_rate_kbps),
                v.link_state or "-",
                *_traffic_cells(v, with_rates),
                f"{v.drops}/{v.errors}",
            ]
        )
    if rows:
        heads = ["VM", "PORT", "MAC", "VLAN", "INGRESS", "EGRESS", "LINK", rx_head, tx_head, "DROP/ERR"]
        lines += render.table(heads, rows).split("\n")
    else:
        lines.append("no VIFs on this switch" + ("" if all_ports else " (--all shows every port)"))
    notes = []
    for v in vifs:
        if v.carries_every_vlan:
            why = "no tag and no trunks" if v.vlan_mode == "trunk" else f"{v.vlan_mode} with no trunks"
            notes.append(f"warning: {v.port} has {why}: it carries EVERY VLAN")
        if v.error:
            notes.append(f"error: {v.port}: {v.error}")
        if v.ingress_policing_rate_kbps:
            notes.append(
                f"note: {v.port} ingress policing is configured ({v.ingress_mechanism}); enforcement has not "
                "been verified here ('hvnet verify FILE' checks it)"
            )
    if with_rates and any(v.rates is None for v in vifs):
        from appliance.services import inventory

        notes.append(
            "note: '-' rates: no kernel counters for that interface and OVSDB statistics refresh every "
            f"{inventory.OVSDB_STATS_INTERVAL_S:g} s; use --rates {inventory.OVSDB_STATS_INTERVAL_S:g} or more"
        )
    for m in inv.mirrors:
        out = m.output_port or (f"VLAN {m.output_vlan}" if m.output_vlan is not None else "?")
        sent = "not reported yet" if m.tx_packets is None else f"{render.count(m.tx_packets)} pkt"
        notes.append(f"mirror {m.name} on {m.bridge} -> {out} (sent {sent})")
    for t in inv.taps:
        copied = "-" if t["packets"] is None else f"{render.count(t['packets'])} pkt, {render.si(t['bytes'], 'B')}"
        notes.append(f"tap {t['name']} on {t['bridge']}: {t['config']} (copied {copied})")
    notes += sorted({f"note: TAP {t['note']}" for t in inv.taps if t["note"]})
    for b in inv.bridges:
        notes += [f"{b.name}: {line}" for line in b.sampling_text()]
    if notes:
        lines += ["", *notes]
    return render.lines(lines)  # one line each: a name cannot steer nor add a line


def cmd_status(args: argparse.Namespace) -> int:
    if getattr(args, "pool", None):
        from appliance.cli.pool import cmd_pool_status

        return cmd_pool_status(args)
    if getattr(args, "hosts", None):
        from appliance.cli import fleet as cli_fleet

        verb = cli_fleet.Verb(
            work=lambda host, _entry: (status_of(host, args), EXIT_OK),
            result=lambda inv: "ok",
            detail=lambda inv: cli_fleet.tally((sum(v.is_vif for v in inv.vifs), "VIF"), (len(inv.bridges), "bridge")),
            text=lambda inv: format_status(inv, all_ports=args.all, with_rates=bool(args.rates)),
            json=lambda inv: inv.to_json(all_ports=args.all),
        )
        return cli_fleet.run(args, verb)
    inv = status_of(host_of(args), args)
    if args.json:
        render.print_json(inv.to_json(all_ports=args.all))
    else:
        print(format_status(inv, all_ports=args.all, with_rates=bool(args.rates)))
    return EXIT_OK


def status_of(host: Host, args: argparse.Namespace) -> Inventory:
    """One host's inventory as ``status`` shows it (``--rates``, ``--bridge``): for one host or each of ``--hosts``.

    Without ``--rates`` the TAPs are found in the same read as the rest (the bridges' external_ids).
    """
    bridge_ids = None
    if args.rates:
        from appliance.services import inventory

        with inventory.connect(host, timeout=args.timeout) as conn:
            live = inventory.LiveInventory(conn, host)
            live.refresh()
            time.sleep(args.rates)
            conn.run_once()
            inv = live.refresh()
    else:
        inv, bridge_ids = status_svc.read_once_with_bridge_ids(host, timeout=args.timeout)
    if args.bridge:
        if not any(b.name == args.bridge for b in inv.bridges):
            raise HvnetError(
                f"no bridge named {args.bridge!r}",
                hint=f"bridges: {', '.join(b.name for b in inv.bridges) or 'none'}",
            )
        inv.vifs = [v for v in inv.vifs if v.bridge == args.bridge]
    from appliance.services.taps import host_taps

    inv.taps = [t.to_json() for t in host_taps(host, bridge_ids) if not args.bridge or t.bridge == args.bridge]
    where = status_svc.platform_of(host)
    inv.host.platform = where.to_json() if where is not None else None
    return inv
