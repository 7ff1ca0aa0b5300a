"""What a running lab publishes, read without loading the lab.

The lab (:mod:`appliance.lab`) writes ``lab.json`` in its run directory and
serves OVSDB on ``db.sock`` there.  The front door reads that record to
resolve "the lab" as a target and to name the lab's VMs; nothing here starts,
stops or imports the lab itself, so a hypervisor's agent never loads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_LAB_DIR = "/run/hvnet/lab"
STATE_FILE = "lab.json"


def lab_dir(env: Mapping[str, str]) -> Path:
    """The lab's run directory: ``$HVNET_LAB_DIR`` or the default."""
    return Path(env.get("HVNET_LAB_DIR") or DEFAULT_LAB_DIR)


def read_state(run_dir: Path) -> dict[str, Any] | None:
    """The lab's record in ``run_dir``, or None when there is none (or it is unreadable)."""
    try:
        state = json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def pid_alive_for(pidfile: Path, marker: str) -> int | None:
    """The PID in ``pidfile`` if that process is alive and its command line mentions ``marker``."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return pid if marker in cmdline else None


def running_lab_db(run_dir: Path) -> str | None:
    """The OVSDB remote of the lab in ``run_dir`` if it is running, else None."""
    run_dir = run_dir.resolve()
    sock = run_dir / "db.sock"
    if (run_dir / STATE_FILE).exists() and sock.exists() and pid_alive_for(run_dir / "ovsdb-server.pid", str(run_dir)):
        return f"unix:{sock}"
    return None


def lab_vm_names(run_dir: Path, remote: str) -> dict[str, str]:
    """VM uuid -> name records of the lab in ``run_dir`` if it serves ``remote`` (else empty)."""
    state = read_state(run_dir)
    if state and state.get("db") == remote:
        return dict(state.get("vm_names", {}))
    return {}


@dataclass(frozen=True)
class LabHosts:
    """A running lab of several hypervisors (a topology with ``hosts``): what a client needs to reach them."""

    run_dir: Path
    names: tuple[str, ...]
    vm_names: dict[str, str] = field(default_factory=dict)

    @property
    def inventory(self) -> Path:
        return self.run_dir / "hosts.yaml"

    @property
    def ssh_config(self) -> Path:
        return self.run_dir / "ssh_config"

    def host_dir(self, name: str) -> Path:
        """Where the lab keeps ``name``'s files: hvnet's state and audit log for it go there too."""
        return self.run_dir / "hosts" / name


def running_lab_hosts(run_dir: Path) -> LabHosts | None:
    """The lab in ``run_dir`` if it is a running lab of hosts (its first host runs), else None."""
    run_dir = run_dir.resolve()
    state = read_state(run_dir)
    names = state.get("hosts") if state else None
    if not state or not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return None
    created = state.get("created")
    vms = created.get("vm_hosts") if isinstance(created, dict) else None
    if not _host_running(run_dir / "hosts" / names[0], isinstance(vms, list) and names[0] in vms):
        return None
    if not (run_dir / "hosts.yaml").exists():
        return None
    return LabHosts(run_dir, tuple(names), dict(state.get("vm_names", {})))


def _host_running(host_dir: Path, vm: bool) -> bool:
    """A lab host's daemon is alive: a namespaced host's ovsdb-server, a VM host's QEMU (its pid file and its
    command line, which names the host's directory)."""
    if vm:
        return pid_alive_for(host_dir / "qemu.pid", str(host_dir)) is not None
    return pid_alive_for(host_dir / "run" / "ovsdb-server.pid", str(host_dir / "run")) is not None
