"""The Fleet screen's rows from probe results: what is shown before, during and after a host answers."""

from __future__ import annotations

from appliance.core.hostlist import InventoryHost
from tui.screens.fleet import PENDING, cell, detail, row_cells

XS = InventoryHost("xs01", "192.0.2.11", user="root", kind="xenserver", group="pool-a")


def test_a_host_not_yet_answered_shows_its_inventory_fields_and_waits() -> None:
    assert row_cells("xs01", None, XS, False) == ("  xs01", "pool-a", "xenserver", *[PENDING] * 5, "checking...")
    assert detail("xs01", XS, None) == "xs01 (root@192.0.2.11): checking..."


def test_a_reachable_host_without_drift_or_agent_keys_shows_dashes() -> None:
    row = {"name": "xs01", "reachable": True, "ovs_version": "3.1.0", "vifs": 12, "datapaths": ["netdev"],
           "seconds": 0.42}  # fmt: skip
    assert row_cells("xs01", row, XS, True) == ("● xs01", "pool-a", "xenserver", "yes", "3.1.0", "12", "-", "-", "")
    assert detail("xs01", XS, row) == "xs01 (root@192.0.2.11): OVS 3.1.0, netdev, 12 VIFs, checked in 0.4 s"


def test_drift_and_agent_are_shown_when_the_probe_gives_them() -> None:
    row = {"reachable": True, "ovs_version": "3.1.0", "vifs": 0, "drift": 3, "agent": True}
    assert row_cells("xs01", row, XS, False)[6:8] == ("3 differ", "yes")
    assert cell(False) == "no" and cell(None) == "-" and cell("") == "-"


def test_a_host_that_is_down_shows_the_first_line_of_why_and_the_local_entry_has_no_inventory() -> None:
    row = {"reachable": False, "error": "cannot connect over SSH\nsecond line", "seconds": 2.0}
    cells = row_cells("local", row, None, False)
    assert cells[:4] == ("  local", "-", "-", "NO") and cells[-1] == "cannot connect over SSH"
    assert detail("local", None, row).startswith("local (this machine): down after 2.0 s: cannot connect")
