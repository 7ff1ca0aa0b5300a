"""``hvnet status``'s read: a host's inventory from one consistent read, the server answering while
the reader loads.

``hvnet status`` runs on every hypervisor, often from scripts, and exits after one read.  On a
1000-VIF switch the server takes tens of milliseconds to write its select; the code that turns the
reply into the inventory (the reader, VM names, counters: a third of the modules the verb loads) takes
about as long to import.  So the select goes out first, and that code is imported while the reply is
on its way: this module loads only the snapshot's request side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.switch import snapshot
from appliance.switch.reader import COLUMNS

if TYPE_CHECKING:
    from appliance.switch import platform
    from appliance.switch.host import Host
    from appliance.switch.inventory import Inventory


def read_once_with_bridge_ids(host: Host, *, timeout: float = 5.0) -> tuple[Inventory, dict[str, dict[str, str]]]:
    """The inventory and each bridge's external_ids by name (see :func:`appliance.switch.api.
    read_once_with_bridge_ids`), the select sent before the inventory's code is loaded."""
    pending = snapshot.start(host.target, COLUMNS, timeout)
    try:
        from appliance.switch import api  # loaded while the server answers
    except BaseException:
        pending.close()
        raise
    return api.read_once_with_bridge_ids(host, timeout=timeout, started=pending)


def platform_of(host: Host) -> platform.Platform | None:
    """What the switch's host is (a XenServer/XCP-ng dom0?), from its files; None when the files hvnet can
    read are not that host's (a database reached over TCP without SSH)."""
    from appliance.switch import platform  # after the select has gone out, like the reader

    if host.label is None and not host.remote.startswith("unix:"):
        return None
    return platform.read(host.runner)
