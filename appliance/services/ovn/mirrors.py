"""Whether a pool's mirror reached the chassis: the OVS mirror ovn-controller makes there, read over its Host.

For each NB Mirror row a chassis binding one of its ports has work to do:
ovn-controller makes an OVS ``Mirror`` of the row's name on ``br-int``,
whose output is a tunnel port ``ovn-NAME`` of the row's type (``gre``,
``erspan``; ``ip6gre``/``ip6erspan`` to an IPv6 sink), and selects the
port's VIF -- ``select_src_port`` for ``from-lport``, ``select_dst_port``
for ``to-lport``.  That is read from the chassis' own OVSDB, so "in the NB"
and "on the chassis" are told apart, as for limits and their meters.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.core.errors import EXIT_OK
from appliance.core.hostlist import Inventory, InventoryHost, InventoryPool
from appliance.endpoints.topology import OVN_BRIDGE
from appliance.ovn.model import OvnMirror
from appliance.ovn.view import PoolView
from appliance.services import fleet
from appliance.switch import api
from appliance.switch.host import Host
from appliance.switch.inventory import Inventory as Switch

Connect = Callable[[InventoryHost], Host]


@dataclass
class Mirrored:
    """One mirrored port on the chassis that binds it: is its VIF selected by the row's OVS mirror?"""

    row: str
    port: str
    vm: str | None
    chassis: str | None
    state: str  # "present" | "missing" | "unknown"
    detail: str = ""


def check(view: PoolView, mirrors: list[OvnMirror], inventory: Inventory, pool: InventoryPool,
          connect: Connect, timeout: float) -> list[Mirrored]:  # fmt: skip
    """Every (row, port) of ``mirrors`` checked on the chassis binding the port (each chassis read once)."""
    if not mirrors:
        return []
    ports = {p.name: p for _, p in view.ports()}
    entries = inventory.select(pool.chassis) if pool.chassis else []
    by_chassis = {c.name: e for c in view.chassis for e in entries if e.name in (c.name, c.hostname)}
    needed = sorted({ports[p].chassis for m in mirrors for p in m.ports if p in ports} & set(by_chassis), key=str)

    def work(host: Host, _entry: InventoryHost) -> tuple[Switch, int]:
        return api.read_inventory_once(host, timeout=timeout), EXIT_OK

    outcomes = dict(zip(needed, fleet.run([by_chassis[c] for c in needed], work, connect,
                                          deadline_s=max(30.0, 6 * timeout))))  # fmt: skip
    out = []
    for m in mirrors:
        for name in m.ports:
            p = ports.get(name)
            chassis = p.chassis if p else None
            o = outcomes.get(chassis or "")
            if chassis is None:
                out.append(
                    Mirrored(m.row, name, p.vm if p else None, None, "unknown", "the port is bound to no chassis")
                )
            elif o is None or o.value is None:
                why = f"chassis {chassis} is not a host of the inventory" if o is None else (o.error or "no result")
                out.append(Mirrored(m.row, name, p.vm if p else None, chassis, "unknown", why))
            else:
                state, detail = _on_chassis(o.value, m, name)
                out.append(Mirrored(m.row, name, p.vm if p else None, chassis, state, f"{chassis}: {detail}"))
    return out


def _on_chassis(switch: Switch, m: OvnMirror, port: str) -> tuple[str, str]:
    vif = next((v for v in switch.vifs if v.ovn_port == port), None)
    if vif is None:
        return "unknown", f"no VIF with iface-id {port} on {OVN_BRIDGE}"
    mirror = next((x for x in switch.mirrors if x.name == m.row and x.bridge == OVN_BRIDGE), None)
    if mirror is None:
        return "missing", f"no OVS mirror {m.row} on {OVN_BRIDGE}"
    selected = mirror.select_src_ports if m.filter == "from-lport" else mirror.select_dst_ports
    if vif.port not in selected:
        return "missing", f"OVS mirror {m.row} does not select {vif.port}"
    out = next((v for v in switch.vifs if v.port == mirror.output_port), None)
    if out is None or out.type.removeprefix("ip6") != m.type:
        found = f"{out.port} ({out.type})" if out else "none"
        return "missing", f"OVS mirror {m.row}'s output is {found}, not a {m.type} tunnel port"
    return "present", f"OVS mirror {m.row} selects {vif.port}, output {out.port} ({out.type})"
