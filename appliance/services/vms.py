"""Real VMs as a guest source: a suite's client and server are VMs of the VM inventory, reached over SSH or
through libvirt's QEMU guest agent, measured on the VIF under test.

A :class:`VmSource` is what a suite gets instead of the lab or probes when
the operator names a VM inventory (``--vms FILE``, ``--guests vms``).  For
each name the suite uses it

* finds the inventory's entry (a glob entry matches several VMs);
* finds the VM's VIF on the driven switch -- by ``vif:``, by ``mac:``, else
  by the VM's name as the switch's name sources know it (libvirt, XAPI) --
  and refuses a VM with none or with several and no choice;
* opens the VM's own access: one multiplexed SSH connection (strict host
  keys, the system client, every argument quoted), or the guest agent
  through ``virsh`` on the VM's hypervisor (the driven host's runner);
* checks the tools the run needs inside the VM (exit 4 naming VM and tool),
  reads its boot id, and stops what an earlier hvnet, killed, left there;
* takes the address under test from the entry, or finds it inside the VM on
  the interface carrying the VIF's MAC (``ip -j addr``): traffic never goes
  to the management address the access uses.
"""

from __future__ import annotations

from typing import Any, Optional

from appliance.core.errors import HvnetError, MissingTool, UsageError
from appliance.core.render import terminal
from appliance.core.vmlist import InventoryVm, VmInventory
from appliance.endpoints.agent import boot_id
from appliance.endpoints.guests import GuestEndpoint, VmAccess, link_with_mac
from appliance.endpoints.topology import Topology
from appliance.netperf.run.pktgen import find_iperf3
from appliance.netperf.run.preflight import MIN_NETPERF, parse_version
from appliance.switch.host import Host
from appliance.switch.inventory import Vif


def vif_for(entry: InventoryVm, vifs: list[Vif], where: str) -> Vif:
    """The VIF under test of ``entry`` on the switch (pure): by ``vif``, by ``mac``, else by the VM's name."""
    ours = [v for v in vifs if v.is_vif]
    if entry.vif is not None:
        found = [v for v in ours if entry.vif in (v.port, v.interface, *v.alias_ports)]
        how = f"vif {entry.vif}"
    elif entry.mac is not None:
        found = [v for v in ours if (v.mac or "").lower() == entry.mac]
        how = f"mac {entry.mac}"
    else:
        found = [v for v in ours if entry.vm in (v.vm_name, v.vm_uuid)]
        how = f"VM name '{terminal(entry.vm)}'"
    if not found:
        raise UsageError(f"VM {entry.name} ({entry.where}): no VIF on {where} matches its {how}",
                         hint="hvnet measures VMs on the switch it drives: give vif: or mac: in the VM inventory, "
                              "or --host the VM's hypervisor")  # fmt: skip
    if len(found) > 1:
        ports = ", ".join(terminal(v.port) for v in found)  # port names are the switch's: planted ones too
        raise UsageError(f"VM {entry.name} ({entry.where}): {len(found)} VIFs on {where} match its {how}: {ports}",
                         hint="say which one is under test: vif: PORT (or mac:) in the VM inventory")  # fmt: skip
    return found[0]


def address_on(ip_json: str, mac: str) -> Optional[str]:
    """The IPv4 address (else the first global IPv6) with its prefix on the interface whose MAC is ``mac``,
    from ``ip -j addr`` run inside the VM (pure; None: no such interface or no address on it)."""
    link = link_with_mac(ip_json, mac)
    infos = [a for a in (link or {}).get("addr_info") or [] if isinstance(a, dict) and a.get("local")]
    for family in ("inet", "inet6"):
        for a in infos:
            if a.get("family") == family and a.get("scope", "global") == "global":
                return f"{a['local']}/{a.get('prefixlen', 32 if family == 'inet' else 128)}"
    return None


def netperf_version(text: str) -> Optional[tuple[int, ...]]:
    """netperf's major and minor version, as the suite's preflight reads ``netperf -V``."""
    version = parse_version(text)
    return version[:2] if version else None


class VmSource:
    """The VMs a run names, opened for as long as the ``with`` lasts (a GuestSource for the engine)."""

    def __init__(self, host: Host, inventory: VmInventory, *, tools: dict[str, tuple[str, ...]] | None = None,
                 timeout: float = 10.0) -> None:  # fmt: skip
        self.host = host
        self.inventory = inventory
        self.tools = tools or {}  # name -> the tools it needs (the run's role for it); absent: netperf
        self.timeout = timeout
        self.swept: list[str] = []  # what earlier runs left running in the VMs, stopped before this one
        self._open: dict[str, GuestEndpoint] = {}
        self._closers: list[Any] = []

    def __enter__(self) -> VmSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every VM's access (SSH masters); a group still open in a VM is the engine's to close."""
        for c in reversed(self._closers):
            try:
                c()
            except HvnetError:
                pass
        self._closers = []
        self._open = {}

    # -- GuestSource ------------------------------------------------------------------------------

    def require(self, topology: Topology, names: list[str]) -> dict[str, GuestEndpoint]:
        """``names`` as endpoints in their VMs (opened once; see the module docstring)."""
        entries = []
        for name in names:
            entry = self.inventory.get(name)
            if entry is None:
                known = ", ".join(self.inventory.names()) or "none"
                raise UsageError(f"{name!r} is not a VM of the VM inventory {self.inventory.file} (VMs: {known})",
                                 hint="add it to the inventory's vms:, or run on the lab (--guests lab)")  # fmt: skip
            entries.append(entry)
        missing = [e for e in entries if e.name not in self._open]
        if missing:
            vifs = self._vifs()
            for entry in missing:
                self._open[entry.name] = self._endpoint(entry, vifs)
        return {n: self._open[n] for n in names}

    # -- one VM -------------------------------------------------------------------------------------

    def _vifs(self) -> list[Vif]:
        from appliance.switch.api import read_inventory_once

        return read_inventory_once(self.host, timeout=self.timeout).vifs

    def _endpoint(self, entry: InventoryVm, vifs: list[Vif]) -> GuestEndpoint:
        vif = vif_for(entry, vifs, self.host.label or "this machine's switch")
        access = self._access(entry)
        self._require_tools(entry, access)
        mac = (vif.mac or entry.mac or "").lower()
        if not mac:
            raise UsageError(f"VM {entry.name} ({entry.where}): its VIF {terminal(vif.port)} carries no attached-mac",
                             hint="give the VM's MAC on that VIF as mac: in the VM inventory")  # fmt: skip
        ip = entry.ip or self._address(entry, access, mac)
        return GuestEndpoint(entry.name, "vm", ip, mac, vif.port, access=access)

    def _access(self, entry: InventoryVm) -> VmAccess:
        if entry.method == "ssh":
            return self._ssh(entry)
        return self._agent(entry)

    def _ssh(self, entry: InventoryVm) -> VmAccess:
        from pathlib import Path, PurePosixPath

        from appliance.core.ssh import SshOptions, SshRunner, SshSession, SshTarget
        from appliance.endpoints.remote import RemoteLauncher

        assert entry.ssh is not None
        opts = SshOptions(known_hosts=Path(entry.known_hosts) if entry.known_hosts else None,
                          identity=Path(entry.identity) if entry.identity else None,
                          config=Path(entry.ssh_config) if entry.ssh_config else None,
                          connect_timeout=self.timeout)  # fmt: skip
        session = SshSession(SshTarget(entry.ssh, entry.user, entry.port), opts)
        self._closers.append(session.close)
        label = f"VM {entry.name} (over SSH to {entry.ssh})"
        try:
            session.open()
        except HvnetError as exc:
            exc.message = f"{label}: {exc.message}"
            raise
        runner = SshRunner(session)
        launcher = RemoteLauncher(runner, PurePosixPath("/var/tmp/hvnet-endpoints"), label=label)
        return VmAccess("ssh", label, runner, launcher, boot_id(runner))

    def _agent(self, entry: InventoryVm) -> VmAccess:
        from appliance.endpoints.agent import AgentChannel, AgentLauncher, AgentRunner

        uri = entry.libvirt or self.host.names.libvirt_uri
        label = f"VM {entry.name} (libvirt domain '{terminal(entry.vm)}', through its guest agent)"
        channel = AgentChannel(self.host.runner, entry.vm, uri=uri, label=label, timeout=self.timeout)
        runner = AgentRunner(channel)
        launcher = AgentLauncher(channel, records=self.host.paths.state_dir / "vm-endpoints")
        boot = boot_id(runner)
        self.swept += [f"{entry.name}: {s}" for s in launcher.sweep()]
        return VmAccess("agent", label, runner, launcher, boot)

    def _require_tools(self, entry: InventoryVm, access: VmAccess) -> None:
        """Every tool this VM's role needs, inside it; netperf with omni output selectors (exit 4 otherwise)."""
        tools = self.tools.get(entry.name, ("netperf",))
        missing = [t for t in tools if access.runner.which_optional(t) is None]
        if missing:
            raise MissingTool(f"{access.label}: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not "
                              "installed in the VM",
                              hint="install in the VM: netperf (Debian non-free, EPEL), iperf3 for packet-rate "
                                   "tests, tcpdump and python3 for the isolation check's traffic method; hvnet "
                                   "copies no programs into VMs")  # fmt: skip
        # --json, which hvnet reads, came with iperf 3.0
        if "iperf3" in tools and not find_iperf3(access.runner)[1].startswith("iperf3 3."):
            raise MissingTool(f"{access.label}: iperf3 in the VM does not report iperf 3.x (JSON output)",
                              hint="install iperf3 in the VM")  # fmt: skip
        if "netperf" in tools:
            res = access.runner.run(["netperf", "-V"], check=False, timeout=self.timeout)
            version = netperf_version(res.stdout + res.stderr)
            if version is None or version < MIN_NETPERF:
                got = ".".join(map(str, version)) if version else "no version"
                raise MissingTool(f"{access.label}: netperf in the VM reports {got}; hvnet reads omni output "
                                  "selectors and latency percentiles (netperf 2.5 or later)",
                                  hint="install netperf 2.7 in the VM")  # fmt: skip

    def _address(self, entry: InventoryVm, access: VmAccess, mac: str) -> str:
        """The address under test, found inside the VM on the interface with the VIF's MAC."""
        res = access.runner.run(["ip", "-j", "addr", "show"], check=False, timeout=self.timeout)
        found = address_on(res.stdout, mac) if res.returncode == 0 else None
        if found is None:
            why = f"ip -j addr exited {res.returncode}" if res.returncode else f"no interface with MAC {mac} has one"
            raise UsageError(f"{access.label}: no address under test found inside the VM ({why})",
                             hint=f"give ip: ADDRESS/PREFIX for {entry.name} in the VM inventory")  # fmt: skip
        return found


class MixedSource:
    """Probes and real VMs in one run (a file naming both ``probes:`` and ``vms:``): each name from the
    source that has it."""

    def __init__(self, probes: Any, vms: VmSource, vm_names: tuple[str, ...]) -> None:
        self.probes = probes
        self.vms = vms
        self.vm_names = set(vm_names)

    def require(self, topology: Topology, names: list[str]) -> dict[str, GuestEndpoint]:
        found: dict[str, GuestEndpoint] = {}
        here = [n for n in names if n not in self.vm_names]
        there = [n for n in names if n in self.vm_names]
        if here:
            found.update(self.probes.require(topology, here))
        if there:
            found.update(self.vms.require(topology, there))
        return {n: found[n] for n in names}
