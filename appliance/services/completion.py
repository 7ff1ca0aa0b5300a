"""The names a shell completes: what exists now, read as cheaply as it can be.

Shell completion runs ``hvnet _complete KIND`` on every Tab, so each kind is
one small read: three name columns in one OVSDB select (no replica, no VM
name lookups), a directory listing, the lab's record.  Nothing here creates
a directory or starts anything, and a source that is not there is simply no
names.
"""

from __future__ import annotations

from pathlib import Path

from appliance.capture import record as rec_mod
from appliance.core import hostlist as hosts
from appliance.core import labstate
from appliance.netperf.define import suite as suite_mod
from appliance.netperf.store import results
from appliance.switch import snapshot
from appliance.switch.host import Host

# Which switch names each kind lists: (table, column).
SWITCH_KINDS = {"bridges": "Bridge", "ports": "Port", "mirrors": "Mirror"}
KINDS = (*SWITCH_KINDS, "captures", "suites", "runs", "guests", "hosts")


def switch_names(host: Host, kind: str, timeout: float) -> list[str]:
    """Bridge, port or mirror names on the host's switch, sorted."""
    table = SWITCH_KINDS[kind]
    snap = snapshot.take(host.target, {table: ["name"]}, timeout)
    return sorted(str(row.name) for row in snap.idl.tables[table].rows.values())


def capture_names(host: Host) -> list[str]:
    """Captures in hvnet's captures directory (without creating it)."""
    base = host.paths.pcap_dir
    if not base.is_dir():
        return []
    return sorted(d.name for d in base.iterdir() if not d.is_symlink() and (d / rec_mod.META_FILE).is_file())


def suite_names() -> list[str]:
    """The shipped suites, by the name ``suite run NAME`` takes (their files are not opened)."""
    return sorted(p.stem for p in suite_mod.shipped())


def run_dirs(host: Host) -> list[str]:
    """Run directories in hvnet's runs directory (those with a results file), newest name last."""
    base = host.paths.runs_dir
    if not base.is_dir():
        return []
    return sorted(str(d) for d in base.iterdir() if (d / results.RESULTS).is_file())


def lab_guests(run_dir: Path) -> list[str]:
    """The guests the lab in ``run_dir`` recorded (none when no lab was brought up)."""
    state = labstate.read_state(run_dir) or {}
    return sorted(str(g["name"]) for g in state.get("guests", []) if isinstance(g, dict) and "name" in g)


def inventory_names(path: Path) -> list[str]:
    """The inventory's hosts and groups (and ``all``), for ``--host`` and ``--hosts``."""
    if not path.is_file():
        return []
    inv = hosts.load(path)
    return sorted({h.name for h in inv.hosts} | {h.group for h in inv.hosts if h.group} | {"all"})
