"""The lab's QEMU guests: libvirt domains booting the probe image.

``hvnet lab up`` calls :func:`up` after the switch and its bridges exist:
libvirt's daemons are found or started (pointed at the lab's switch), the
probe image is built or found in its cache, the accelerator is detected
(KVM only if a KVM guest really boots), then every guest is *defined* (so
``virsh destroy``/``start`` work as on a real host) and started.  libvirt
itself plugs each NIC into OVS as ``vnetN`` with the guest's VLAN and its
``external_ids``; the lab never writes those ports.  Each guest gets a
channel multiplexer, and ``up`` returns once every guest's agent answered
and every VIF has an OpenFlow port.

Everything is recorded in the lab's state before it is created, and
:func:`down` removes exactly that: the domains whose UUID the lab chose (a
same-named domain of someone else's is never touched), their multiplexers,
their logs, and the daemons the lab started.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from appliance.core.errors import LabError
from appliance.endpoints.topology import Guest, Topology
from appliance.lab.switch import Switch
from appliance.lab.vm import accel, libvirtd
from appliance.lab.vm.channel import ChannelError, GuestClient, mux_pid, start_mux, stop_mux
from appliance.lab.vm.domain import DomainSpec, Nic, domain_xml
from appliance.switch.names import quiet_libvirt, state_name

READY_TIMEOUT_S = 90.0  # boot under TCG takes seconds; 2 cores booting 4 guests at once take longer
QEMU_LOG_DIR = Path("/var/log/libvirt/qemu")


def domain_name(guest: str) -> str:
    """A guest's domain is named like the guest, so libvirt and the lab give a VIF the same VM name
    (policies select ``vm: NAME``); the domain's title says it is a lab guest."""
    return guest


class GuestFiles:
    """Where a QEMU guest's run-time files live in the lab's run directory."""

    def __init__(self, run_dir: Path, guest: str) -> None:
        d = run_dir / "guests"
        self.dir = d
        self.chan = d / f"{guest}.chan"  # QEMU binds it: the virtio-serial channel
        self.sock = d / f"{guest}.sock"  # the multiplexer's: any number of hvnet clients
        self.mux_pid = d / f"{guest}.mux.pid"
        self.mux_log = d / f"{guest}.mux.log"
        self.console = d / f"{guest}.console.log"


def cmdline(g: Guest) -> str:
    """The probe kernel's command line: console on the serial port, the guest's address and name."""
    from appliance.lab.vm.image import kernel_cmdline

    return kernel_cmdline(g.ip, extra=[f"hvnet.hostname={g.name}"])


def size_text(g: Guest, domain_type: str) -> str:
    """The guest's size as booted, and what a vCPU count means under software emulation.

    Under TCG every vCPU is an emulator thread sharing the host's cores with the
    switch and the other guests: a figure measured against the vCPU count there
    is the emulator's, not comparable with a study's VMs under a hypervisor.
    """
    size = f"{g.vcpus} vCPU{'s' if g.vcpus != 1 else ''}, {g.memory_mib} MiB"
    if domain_type != "kvm" and g.vcpus > 1:
        cores = os.cpu_count() or 1
        size += (f"; under TCG its {g.vcpus} vCPUs are emulator threads on this host's {cores} core(s): "
                 "a vCPU sweep measures the emulator, not comparable with VMs under KVM or Xen")  # fmt: skip
    return size


def _open(uri: str = libvirtd.URI) -> Any:
    import libvirt

    quiet_libvirt()
    try:
        return libvirt.open(uri)
    except libvirt.libvirtError as exc:
        raise LabError(f"cannot connect to libvirt at {uri}: {exc}") from None


def _lookup(conn: Any, name: str) -> Any | None:
    import libvirt

    try:
        return conn.lookupByName(name)
    except libvirt.libvirtError:
        return None


def check_conflicts(t: Topology, mine: list[str]) -> list[str]:
    """Domains named like the lab's guests that the lab did not create."""
    qguests = [g for g in t.guests if g.kind == "qemu"]
    if not qguests or not libvirtd.reachable():
        return []
    conn = _open()
    try:
        clashes = []
        for g in qguests:
            dom = _lookup(conn, domain_name(g.name))
            if dom is not None and (domain_name(g.name) not in mine or dom.UUIDString() != g.vm_uuid(t.name)):
                clashes.append(f"libvirt domain {domain_name(g.name)}")
        return clashes
    finally:
        conn.close()


def up(
    t: Topology,
    switch: Switch,
    state: dict[str, Any],
    record: Callable[[str, str], None],
    save: Callable[[], None],
    actions: list[str],
) -> None:
    """Start the topology's QEMU guests (idempotent) and wait until they are ready."""
    qguests = [g for g in t.guests if g.kind == "qemu"]
    if not qguests:
        return
    from appliance.lab.vm.image import build_image

    run_dir = switch.run_dir
    why = libvirtd.available()
    if why:
        raise LabError(f"QEMU guests need libvirt: {why}", hint="run .ci/setup-host, or use namespace guests only")
    image = build_image()
    actions.append(f"probe image {image.digest[:12]}: {'built' if image.built else 'cached'} ({image.initrd})")
    acc = accel.detect(Path(image.kernel), Path(image.initrd))
    state["accel"] = {"domain_type": acc.domain_type, "reason": acc.reason}
    save()
    actions.append(f"guests run under {acc.name}: {acc.reason}")

    daemons = libvirtd.ensure(run_dir, run_dir, kvm_works=acc.domain_type == "kvm")
    lv = state.setdefault("libvirt", {"started": {}, "linked": None})
    lv["started"].update(daemons.started)
    lv["linked"] = lv.get("linked") or daemons.linked
    save()
    actions.extend(daemons.actions)

    conn = _open()
    try:
        for g in qguests:
            files = GuestFiles(run_dir, g.name)
            files.dir.mkdir(parents=True, exist_ok=True)
            name = domain_name(g.name)
            dom = _lookup(conn, name)
            if dom is not None and dom.UUIDString() != g.vm_uuid(t.name):
                raise LabError(f"libvirt domain {name} exists and is not this lab's guest (another uuid)",
                               hint=f"rename or undefine that domain, or rename guest {g.name}")  # fmt: skip
            record("domains", name)  # the lab's uuid: ours, even when defined by an earlier 'lab up'
            if dom is None:
                spec = DomainSpec(
                    name=name,
                    uuid=g.vm_uuid(t.name),
                    domain_type=acc.domain_type,
                    kernel=str(image.kernel),
                    initrd=str(image.initrd),
                    cmdline=cmdline(g),
                    channel=str(files.chan),
                    console_log=str(files.console),
                    memory_mib=g.memory_mib,
                    vcpus=g.vcpus,
                    nics=(Nic(g.bridge, g.mac, g.tag, g.trunks, g.vlan_mode),),
                )
                dom = conn.defineXML(domain_xml(spec))
                actions.append(f"defined libvirt domain {name} ({acc.name}, {size_text(g, acc.domain_type)})")
            if not dom.isActive():
                dom.create()
                actions.append(f"started {name}: libvirt plugs its NIC into {g.bridge}")
            record("muxes", str(files.mux_pid))
            start_mux(files.chan, files.sock, files.mux_pid, files.mux_log)
    finally:
        conn.close()
    _wait_ready(qguests, run_dir, actions)
    _wait_vifs(qguests, switch)


def _wait_ready(qguests: list[Guest], run_dir: Path, actions: list[str]) -> None:
    def ready(g: Guest) -> tuple[str, float | str]:
        try:
            with GuestClient(GuestFiles(run_dir, g.name).sock) as c:
                return g.name, c.wait_ready(READY_TIMEOUT_S)
        except ChannelError as exc:
            return g.name, str(exc)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(qguests)) as pool:
        results = list(pool.map(ready, qguests))
    bad = [f"{name}: {r}" for name, r in results if isinstance(r, str)]
    if bad:
        raise LabError(
            "QEMU guests did not become ready: " + "; ".join(bad),
            hint=f"see the consoles in {run_dir / 'guests'}/*.console.log",
        )
    actions.append(f"QEMU guests ready in {time.monotonic() - t0:.1f} s: {', '.join(n for n, _ in results)}")


def vifs_by_mac(switch: Switch) -> dict[str, tuple[str, int]]:
    """``attached-mac`` -> (port name, ofport) of every VIF on the switch, in one read
    (an ofport of -1 or 0 means not attached yet)."""
    out = switch.vsctl("--format=json", "--columns=name,ofport,external_ids", "list", "Interface", check=False)
    try:
        rows = json.loads(out)["data"] if out.strip() else []
    except (ValueError, KeyError):
        return {}
    found = {}
    for name, ofport, ids in rows:
        mac = dict(ids[1]).get("attached-mac") if isinstance(ids, list) and ids[0] == "map" else None
        if mac:
            found[mac] = (name, ofport if isinstance(ofport, int) else -1)
    return found


def find_vif(switch: Switch, mac: str) -> tuple[str, int] | None:
    """The (port name, ofport) libvirt gave the NIC with ``mac``, if plugged."""
    return vifs_by_mac(switch).get(mac)


def _wait_vifs(qguests: list[Guest], switch: Switch, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    missing = list(qguests)
    while missing and time.monotonic() < deadline:
        plugged = vifs_by_mac(switch)
        missing = [g for g in missing if plugged.get(g.mac, ("", -1))[1] <= 0]
        if missing:
            time.sleep(0.1)
    if missing:
        raise LabError("libvirt did not plug a VIF with an OpenFlow port for " + ", ".join(g.name for g in missing))


def domain_states(names: list[str]) -> dict[str, str]:
    """libvirt's word for each named domain's state (absent: no such domain, or no libvirt); one connection."""
    if not names or not libvirtd.reachable():
        return {}
    import libvirt

    quiet_libvirt()
    try:
        conn = libvirt.openReadOnly(libvirtd.URI)
    except libvirt.libvirtError:
        return {}
    try:
        return {n: state_name(dom.state()[0]) for n in names if (dom := _lookup(conn, n)) is not None}
    finally:
        conn.close()


def down(state: dict[str, Any], recorded: Callable[[str], list[str]], run_dir: Path, actions: list[str]) -> None:
    """Remove the lab's domains, multiplexers, files and the daemons it started."""
    domains = recorded("domains")
    uuids = {domain_name(g["name"]): g.get("vm_uuid") for g in state.get("guests", []) if g.get("kind") == "qemu"}
    lv = state.setdefault("libvirt", {"started": {}, "linked": None})
    if domains and libvirtd.available() is None and not libvirtd.reachable():
        # The definitions outlive libvirtd (a crash, a reboot): start it again to remove them,
        # rather than leave domains behind that would block the next 'lab up'.
        try:
            again = libvirtd.ensure(run_dir, run_dir, kvm_works=state.get("accel", {}).get("domain_type") == "kvm")
            lv.setdefault("started", {}).update(again.started)
            lv["linked"] = lv.get("linked") or again.linked
        except LabError as exc:
            actions.append(f"could not remove domains {', '.join(domains)}: {exc}")
    if domains and libvirtd.reachable():
        import libvirt

        conn = _open()
        try:
            for name in domains:
                dom = _lookup(conn, name)
                if dom is None or (uuids.get(name) and dom.UUIDString() != uuids[name]):
                    continue
                try:
                    if dom.isActive():
                        dom.destroy()
                    dom.undefine()
                    actions.append(f"destroyed and undefined libvirt domain {name}")
                except libvirt.libvirtError as exc:
                    actions.append(f"could not remove domain {name}: {exc}")
        finally:
            conn.close()
    for name in domains:
        log = QEMU_LOG_DIR / f"{name}.log"
        if log.exists():
            log.unlink()
    for pidfile in recorded("muxes"):
        if stop_mux(pidfile):
            actions.append(f"stopped the channel multiplexer {Path(pidfile).stem.split('.')[0]}")
    actions.extend(libvirtd.release(lv.get("started", {}), lv.get("linked"), run_dir))


def statuses(guests: list[dict[str, Any]], switch: Switch, run_dir: Path) -> dict[str, dict[str, Any]]:
    """The QEMU guests' live records (domain state, current VIF, channel), by name: one OVSDB
    read and one libvirt connection for all of them."""
    plugged = vifs_by_mac(switch) if switch.pid("ovsdb-server") else {}
    states = domain_states([domain_name(g["name"]) for g in guests])
    out = {}
    for g in guests:
        files = GuestFiles(run_dir, g["name"])
        vif = plugged.get(g["mac"])
        dstate = states.get(domain_name(g["name"]))
        out[g["name"]] = {
            **g,
            "vif": vif[0] if vif else "",
            "domain": domain_name(g["name"]),
            "domain_state": dstate,
            "channel": str(files.sock),
            "namespace_present": dstate == "running" and mux_pid(files.mux_pid) is not None,
            "vif_present": bool(vif and vif[1] > 0),
        }
    return out


def guest_client(run_dir: Path, guest: str) -> GuestClient:
    return GuestClient(GuestFiles(run_dir, guest).sock)
