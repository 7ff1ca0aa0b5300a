"""An OVN pool in the lab: central databases on the console's side, a chassis per lab host.

What an operator's pool looks like, small: ``ovn-northd`` with its
northbound and southbound databases (Debian's ``ovn-central``) run here, in
the lab's directory; each lab host (an :class:`SshHost` namespace with its
own OVS) runs ``ovn-controller`` (``ovn-host``) as a chassis, which builds
the host's ``br-int`` flows from the southbound database and reaches the
other chassis through Geneve tunnels.

The tunnels need an underlay.  Each host gets a ``brphy`` bridge whose
internal port carries its underlay address (``10.254.0.N``, jumbo frames,
so a guest's 1500-byte frame still fits once encapsulated) and whose
ports are veth "cables" to its neighbours, a chain like the trunk links of
a VLAN lab (a chain, so nothing loops).  With the userspace datapath, OVS
routes tunnel packets only through an address on one of its own bridges,
so the address sits on ``brphy``, not on the cable.

Each host's chassis reaches the southbound database over its management
link (the database listens on the console's end of every host's link), as
a chassis reaches a real pool's central node.  Guests are plugged into
``br-int`` with ``external_ids:iface-id`` naming their logical switch port,
which is how libvirt and OpenStack bind a VM to OVN.

Everything here is started by pid file and stopped by the pid it wrote;
:func:`stop` is safe to repeat and after a half-finished start.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass
from pathlib import Path

from appliance.core import labstate, proc
from appliance.core.errors import LabError
from appliance.endpoints.topology import Guest, Topology
from appliance.lab.sshhost import SshHost
from appliance.lab.switch import stop_pid
from appliance.ovn.view import VLAN_KEY

NB_PORT = 6641
SB_PORT = 6642
UNDERLAY_BRIDGE = "brphy"
UNDERLAY_NET = "10.254.0"
# Geneve adds ~58 bytes: an underlay of jumbo frames carries the guests' full 1500-byte frames (at 1500
# the userspace datapath drops what no longer fits, and TCP between chassis stalls while ping works).
UNDERLAY_MTU = 9000
SCHEMAS = {"nb": "/usr/share/ovn/ovn-nb.ovsschema", "sb": "/usr/share/ovn/ovn-sb.ovsschema"}
CENTRAL_DAEMONS = ("northd", "sb", "nb")  # in the order they are stopped
BIND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Central:
    """The pool's central node: NB and SB ovsdb-servers and ovn-northd, in ``dir``."""

    dir: Path

    def sock(self, db: str) -> Path:
        return self.dir / f"{db}.sock"

    def remote(self, db: str) -> str:
        return f"unix:{self.sock(db)}"

    def pid(self, daemon: str) -> int | None:
        return labstate.pid_alive_for(self.dir / f"{daemon}.pid", str(self.dir))

    def start(self, hosts: dict[str, SshHost]) -> list[str]:
        """Start what is not running; the SB database listens on each host's management link."""
        self.dir.mkdir(parents=True, exist_ok=True)
        started = []
        for db, port in (("nb", NB_PORT), ("sb", SB_PORT)):
            if self.pid(db) is not None:
                continue
            dbfile = self.dir / f"{db}.db"
            if not dbfile.exists():
                proc.run(["ovsdb-tool", "create", str(dbfile), SCHEMAS[db]])
            self.sock(db).unlink(missing_ok=True)
            remotes = [f"--remote=punix:{self.sock(db)}"]
            remotes += [f"--remote=ptcp:{port}:{h.peer}" for h in hosts.values()]
            proc.run(["ovsdb-server", str(dbfile), *remotes, *self._daemon_args(db)])
            started.append(f"ovsdb-server ({db.upper()}, {self.sock(db)})")
        if self.pid("northd") is None:
            proc.run(["ovn-northd", f"--ovnnb-db={self.remote('nb')}", f"--ovnsb-db={self.remote('sb')}",
                      *self._daemon_args("northd")])  # fmt: skip
            started.append("ovn-northd")
        return started

    def _daemon_args(self, name: str) -> list[str]:
        d = self.dir
        return [f"--pidfile={d / name}.pid", f"--unixctl={d / name}.ctl", f"--log-file={d / name}.log",
                "--detach", "--no-chdir"]  # fmt: skip

    def nbctl(self, *args: str, timeout: float = 30.0) -> str:
        argv = ["ovn-nbctl", f"--db={self.remote('nb')}", f"--timeout={int(timeout)}", *args]
        return proc.run(argv, timeout=timeout + 5).stdout

    def sbctl(self, *args: str) -> str:
        return proc.run(["ovn-sbctl", f"--db={self.remote('sb')}", "--timeout=10", *args]).stdout

    def stop(self) -> list[str]:
        stopped = []
        for daemon in CENTRAL_DAEMONS:
            pid = self.pid(daemon)
            if pid is not None:
                stop_pid(pid)
                stopped.append(f"{'ovn-northd' if daemon == 'northd' else 'ovsdb-server ' + daemon.upper()} "
                               f"(pid {pid})")  # fmt: skip
        return stopped


def central(run_dir: Path) -> Central:
    return Central(Path(run_dir) / "ovn")


def underlay_address(index: int) -> str:
    """Host number ``index`` (from 1) in the underlay."""
    return f"{UNDERLAY_NET}.{index}"


def cable(a: str, b: str) -> str:
    """The underlay veth end on host ``a`` that leads to host ``b``."""
    return f"u-{b}"


def make_underlay(hosts: dict[str, SshHost]) -> list[str]:
    """The cables between neighbouring hosts and each host's ``brphy`` with its underlay address."""
    done = []
    names = list(hosts)
    for a, b in zip(names, names[1:]):
        ha, hb = hosts[a], hosts[b]
        if _link_in(ha.netns, cable(a, b)):
            continue
        proc.run(["ip", "link", "add", cable(a, b), "netns", ha.netns, "type", "veth",
                  "peer", "name", cable(b, a), "netns", hb.netns])  # fmt: skip
        for h, end in ((ha, cable(a, b)), (hb, cable(b, a))):
            proc.run(["ip", "-n", h.netns, "link", "set", end, "mtu", str(UNDERLAY_MTU), "up"])
            proc.run(proc.in_netns(h.netns, ["ethtool", "-K", end, "tx", "off"]))
        done.append(f"cabled {a} {cable(a, b)} -- {b} {cable(b, a)} (the Geneve underlay)")
    for i, (name, h) in enumerate(hosts.items(), start=1):
        ends = [cable(name, other) for other in _neighbours(names, name)]
        h.switch.vsctl("--may-exist", "add-br", UNDERLAY_BRIDGE, "--", "set", "Bridge", UNDERLAY_BRIDGE,
                       "datapath_type=netdev", "--", "set", "Interface", UNDERLAY_BRIDGE,
                       f"mtu_request={UNDERLAY_MTU}", *_add_ports(ends))  # fmt: skip
        addr = f"{underlay_address(i)}/24"
        shown = proc.run(["ip", "-n", h.netns, "-o", "addr", "show", "dev", UNDERLAY_BRIDGE]).stdout
        if addr not in shown:
            proc.run(["ip", "-n", h.netns, "addr", "add", addr, "dev", UNDERLAY_BRIDGE])
        proc.run(["ip", "-n", h.netns, "link", "set", UNDERLAY_BRIDGE, "up"])
    return done


def _neighbours(names: list[str], name: str) -> list[str]:
    i = names.index(name)
    return [n for n in (names[i - 1] if i else None, names[i + 1] if i + 1 < len(names) else None) if n]


def _add_ports(ends: list[str]) -> list[str]:
    args: list[str] = []
    for end in ends:
        args += ["--", "--may-exist", "add-port", UNDERLAY_BRIDGE, end]
    return args


def _link_in(netns: str, name: str) -> bool:
    return proc.run(["ip", "-n", netns, "link", "show", "dev", name], check=False).returncode == 0


def controller_pid(host: SshHost) -> int | None:
    return labstate.pid_alive_for(host.switch.run_dir / "ovn-controller.pid", str(host.switch.run_dir))


def start_chassis(host: SshHost, index: int) -> bool:
    """Point the host's OVS at the pool (system-id, SB remote, Geneve on its underlay address) and start
    its ovn-controller; False when it already runs."""
    host.switch.vsctl(
        "set", "Open_vSwitch", ".", f"external_ids:system-id={host.name}",
        f"external_ids:ovn-remote=tcp:{host.peer}:{SB_PORT}", "external_ids:ovn-encap-type=geneve",
        f"external_ids:ovn-encap-ip={underlay_address(index)}", "external_ids:ovn-bridge-datapath-type=netdev",
    )  # fmt: skip
    if controller_pid(host) is not None:
        return False
    d = host.switch.run_dir
    env = {**host.switch.env, "OVN_RUNDIR": str(d), "OVN_LOGDIR": str(d)}
    proc.run(proc.in_netns(host.netns, ["ovn-controller", host.switch.remote, f"--pidfile={d}/ovn-controller.pid",
                                        f"--log-file={d}/ovn-controller.log", "--detach", "--no-chdir"]),
             env=env)  # fmt: skip
    return True


def stop_chassis(host: SshHost) -> str | None:
    pid = controller_pid(host)
    if pid is None:
        return None
    stop_pid(pid)
    return f"stopped ovn-controller on {host.name} (pid {pid})"


def port_name(t: Topology, g: Guest) -> str:
    """The guest's logical switch port: named by its VIF's iface-id, as libvirt and OpenStack bind ports."""
    return g.vif_uuid(t.name)


def switch_vlan(name: str) -> int | None:
    """The VLAN a lab logical switch stands for: ``vlanN`` stands for VLAN N (the study's VLANs), others none."""
    digits = name.removeprefix("vlan")
    return int(digits) if name.startswith("vlan") and digits.isdigit() and 0 < int(digits) < 4095 else None


def make_logical_network(c: Central, t: Topology) -> None:
    """The logical switches (``vlanN`` marked ``external_ids:hvnet-vlan=N``, so a policy's ``vlan: {tag: N}``
    finds it) and one port per guest (its MAC and address), in one ovn-nbctl transaction."""
    args: list[str] = []
    for ls in t.ovn_switches:
        vlan = switch_vlan(ls)
        marks = ["external_ids:hvnet-lab=1", *([f"external_ids:{VLAN_KEY}={vlan}"] if vlan is not None else [])]
        args += ["--", "--may-exist", "ls-add", ls, "--", "set", "Logical_Switch", ls, *marks]
    for g in t.guests:
        lsp = port_name(t, g)
        args += ["--", "--may-exist", "lsp-add", g.lswitch or "", lsp,
                 "--", "lsp-set-addresses", lsp, f"{g.mac} {g.address}",
                 "--", "set", "Logical_Switch_Port", lsp, f"external_ids:hvnet-vm={g.name}"]  # fmt: skip
    c.nbctl(*args[1:])


def wait_bound(c: Central, t: Topology, timeout: float = BIND_TIMEOUT_S) -> None:
    """Until every guest's port is bound to its host's chassis and every chassis has caught up (hv_cfg)."""
    want = {port_name(t, g): g.host for g in t.guests}
    deadline = time.monotonic() + timeout
    while True:
        bound = _bindings(c)
        if all(bound.get(lsp) == host for lsp, host in want.items()):
            break
        if time.monotonic() > deadline:
            missing = sorted(f"{lsp} (on {host})" for lsp, host in want.items() if bound.get(lsp) != host)
            raise LabError(f"OVN did not bind every guest's port within {timeout:.0f} s: {', '.join(missing)}",
                           hint=f"see the ovn-controller logs of the lab hosts and {c.dir}")  # fmt: skip
        time.sleep(0.1)
    c.nbctl("--wait=hv", "sync", timeout=max(1.0, deadline - time.monotonic()))


def _bindings(c: Central) -> dict[str, str]:
    """Logical port -> chassis name, from the southbound Port_Binding and Chassis tables."""
    csv_args = ("--format=csv", "--no-headings", "--data=bare")
    chassis = dict(_rows(c.sbctl(*csv_args, "--columns=_uuid,name", "list", "Chassis")))
    return {lp: chassis.get(ch, "") for lp, ch in _rows(c.sbctl(*csv_args, "--columns=logical_port,chassis",
                                                                 "list", "Port_Binding"))}  # fmt: skip


def _rows(text: str) -> list[tuple[str, str]]:
    """Two-column CSV rows (an unset column is an empty field)."""
    return [(r[0], r[1] if len(r) > 1 else "") for r in csv.reader(io.StringIO(text)) if r]
