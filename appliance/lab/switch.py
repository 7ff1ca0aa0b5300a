"""A private Open vSwitch: ovsdb-server + ovs-vswitchd in their own run directory.

The lab, the tests and the benchmarks start OVS this way so that nothing
touches a system OVS that may be running: every socket, pidfile, log and the
database live under ``run_dir``, and ``OVS_RUNDIR`` points the daemons (and
the tools hvnet runs against them) there -- ovs-vswitchd otherwise creates
its per-bridge ``.mgmt`` sockets in the system run directory.

Daemons are stopped only by the PID recorded in *this* run directory, and only
if that process's command line still names the run directory (a PID reused by
an unrelated process is never signalled).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from appliance.core import labstate, proc
from appliance.core.errors import LabError

SCHEMA_PATHS = (
    "/usr/share/openvswitch/vswitch.ovsschema",
    "/usr/local/share/openvswitch/vswitch.ovsschema",
)


_pid_alive_for = labstate.pid_alive_for


def _os_release() -> dict[str, str]:
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return out


def stop_pid(pid: int, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; returns once the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(100):
        if not Path(f"/proc/{pid}").exists() or _is_zombie(pid):
            return
        time.sleep(0.05)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


class Switch:
    """ovsdb-server and (optionally) ovs-vswitchd rooted at ``run_dir``."""

    def __init__(self, run_dir: str | Path, netns: str | None = None) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.netns = netns  # a lab host's namespace: its daemons (and so its ports) live there

    def _daemon(self, argv: list[str]) -> list[str]:
        return proc.in_netns(self.netns, argv) if self.netns else argv

    # -- paths ------------------------------------------------------------

    @property
    def db_file(self) -> Path:
        return self.run_dir / "conf.db"

    @property
    def db_sock(self) -> Path:
        return self.run_dir / "db.sock"

    @property
    def remote(self) -> str:
        return f"unix:{self.db_sock}"

    @property
    def env(self) -> dict[str, str]:
        d = str(self.run_dir)
        return {"OVS_RUNDIR": d, "OVS_LOGDIR": d, "OVS_DBDIR": d}

    def ctl(self, daemon: str) -> str:
        return str(self.run_dir / f"{daemon}.ctl")

    def pid(self, daemon: str) -> int | None:
        """PID of ``daemon`` ("ovsdb-server" or "ovs-vswitchd") if it runs for us."""
        return _pid_alive_for(self.run_dir / f"{daemon}.pid", str(self.run_dir))

    # -- life cycle ----------------------------------------------------------

    def start(self, vswitchd: bool = True) -> None:
        """Start whatever is not running yet (idempotent)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        env = self.env
        if self.pid("ovsdb-server") is None:
            if not self.db_file.exists():
                schema = next((p for p in SCHEMA_PATHS if os.path.exists(p)), None)
                if schema is None:
                    raise LabError(
                        "vswitch.ovsschema not found", hint="install openvswitch-switch (Debian) / openvswitch (EL)"
                    )
                proc.run(["ovsdb-tool", "create", str(self.db_file), schema], env=env)
            self.db_sock.unlink(missing_ok=True)
            proc.run(
                self._daemon([
                    "ovsdb-server",
                    str(self.db_file),
                    f"--remote=punix:{self.db_sock}",
                    f"--pidfile={self.run_dir / 'ovsdb-server.pid'}",
                    f"--unixctl={self.ctl('ovsdb-server')}",
                    f"--log-file={self.run_dir / 'ovsdb-server.log'}",
                    "--detach",
                    "--no-chdir",
                ]),
                env=env,
            )  # fmt: skip
            proc.run(["ovs-vsctl", f"--db={self.remote}", "--no-wait", "init"], env=env)
            self._record_versions(schema_file=next((p for p in SCHEMA_PATHS if os.path.exists(p)), None))
        if vswitchd and self.pid("ovs-vswitchd") is None:
            proc.run(
                self._daemon([
                    "ovs-vswitchd",
                    self.remote,
                    f"--pidfile={self.run_dir / 'ovs-vswitchd.pid'}",
                    f"--unixctl={self.ctl('ovs-vswitchd')}",
                    f"--log-file={self.run_dir / 'ovs-vswitchd.log'}",
                    "--detach",
                    "--no-chdir",
                ]),
                env=env,
                timeout=30,
            )  # fmt: skip

    def _record_versions(self, schema_file: str | None) -> None:
        """Fill ``ovs_version``, ``db_version``, ``system-type/version`` the
        way the distribution's ``ovs-ctl`` does at start-up, so inventory
        reports the same fields for the lab as for a real host."""
        version = proc.run(["ovs-vswitchd", "--version"]).stdout.splitlines()[0].split()[-1]
        sets = [f"ovs_version={version}"]
        if schema_file:
            db_version = proc.run(["ovsdb-tool", "schema-version", schema_file]).stdout.strip()
            sets.append(f"db_version={db_version}")
        os_release = _os_release()
        if os_release.get("ID"):
            sets.append(f"system_type={os_release['ID']}")
        if os_release.get("VERSION_ID"):
            sets.append(f"system_version={os_release['VERSION_ID']}")
        proc.run(["ovs-vsctl", f"--db={self.remote}", "--no-wait", "set", "Open_vSwitch", ".", *sets], env=self.env)

    def stop(self) -> list[str]:
        """Stop our daemons (vswitchd first); returns what was stopped."""
        stopped = []
        for daemon in ("ovs-vswitchd", "ovsdb-server"):
            pid = self.pid(daemon)
            if pid is not None:
                stop_pid(pid)
                stopped.append(f"{daemon} (pid {pid})")
        return stopped

    def kill_ovsdb(self) -> None:
        """Kill ovsdb-server abruptly (SIGKILL), as a crash would; for tests."""
        pid = self.pid("ovsdb-server")
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            stop_pid(pid, timeout=0.1)

    # -- tools against this instance ----------------------------------------

    def vsctl(self, *args: str, check: bool = True) -> str:
        """``ovs-vsctl`` against this database (tests use it as a witness).

        Without a running ovs-vswitchd, ``--no-wait`` is added: there is no
        one to bump ``cur_cfg`` and ovs-vsctl would wait for it forever.
        """
        no_wait = [] if self.pid("ovs-vswitchd") else ["--no-wait"]
        argv = ["ovs-vsctl", f"--db={self.remote}", "--timeout=10", *no_wait, *args]
        return proc.run(argv, env=self.env, check=check).stdout

    def appctl(self, daemon: str, *args: str, check: bool = True) -> str:
        return proc.run(["ovs-appctl", "-t", self.ctl(daemon), *args], env=self.env, check=check).stdout
