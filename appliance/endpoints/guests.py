"""Guests as the engine sees them: where a command runs, and who the guest is.

Suites and isolation checks run programs *inside* guests (netperf,
netserver, tcpdump, ARP probes).  What a guest is -- a network namespace, a
QEMU VM reached over its agent channel -- is the business of whoever made it
(hvnet's lab, see :mod:`appliance.lab.guests`); the engine only needs the
facts below and the argv that runs a command in the guest.  The front end
hands the engine a :class:`GuestSource`; the engine never imports the lab.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:
    from appliance.core.runner import CommandRunner
    from appliance.endpoints.jobs import Launcher
    from appliance.endpoints.topology import Topology


@dataclass(frozen=True)
class VmAccess:
    """A real VM's own way in, opened by the guest source that found it: over SSH into the VM, or through
    libvirt's QEMU guest agent on its hypervisor.  Everything hvnet runs in the VM goes through these two:
    one-off commands through ``runner`` (preflight, its address, its CPU), a step's processes through a
    group of ``launcher`` (started together by one shell in the VM, stamped by the VM's clock)."""

    method: str  # "ssh" | "agent"
    label: str  # how messages name it: "VM web-01 (over SSH)"
    runner: CommandRunner
    launcher: Launcher
    boot_id: Optional[str] = None  # the VM's boot: a PID recorded under another boot is never signalled


@dataclass(frozen=True)
class GuestEndpoint:
    """One guest, resolved: its identity on the switch and how to run commands in it."""

    name: str
    kind: str  # "netns" | "qemu" (the lab's) | "vm" (a real VM, through ``access``)
    ip: str  # with its prefix length, as the topology gives it (10.0.0.1/24)
    mac: str
    vif: str  # the guest's VIF as it is now (a VM's vnetN changes when its domain restarts)
    netns: str | None = None  # a namespace guest's namespace
    channel: str | None = None  # a VM's agent channel (its multiplexer's socket)
    gexec: tuple[str, ...] = ()  # the local program that runs a command through ``channel``
    # True: ``netns`` is on the driven host (a probe over ``--host``), reached through the Host's runner and
    # started by appliance.endpoints' remote shell; False: a namespace (or VM channel) of this machine
    remote: bool = False
    access: Optional[VmAccess] = field(default=None, compare=False)

    @property
    def address(self) -> str:
        return self.ip.split("/")[0]

    @property
    def in_vm(self) -> bool:
        return self.channel is not None

    def argv(self, argv: list[str], *, stdin: bool | None = None) -> list[str]:
        """The local argv that runs ``argv`` inside this guest (output streamed, exit status kept).

        ``stdin=False`` keeps hvnet's own stdin away from a VM's command.  A real VM's argv is its own:
        ``access.runner`` runs it there.
        """
        if self.access is not None:
            return list(argv)
        if self.channel:
            flags = [] if stdin is None else ["--stdin" if stdin else "--no-stdin"]
            return [*self.gexec, *flags, self.channel, "--", *argv]
        if self.netns:
            return ["ip", "netns", "exec", self.netns, *argv]
        return list(argv)


def link_with_mac(ip_json: str, mac: str) -> Optional[dict[str, Any]]:
    """The interface whose MAC is ``mac`` in ``ip -j link`` or ``ip -j addr`` output from inside a guest
    (pure; None: no such interface, or not that output): a VM's data interface is the one carrying its VIF's
    MAC, never its management link."""
    try:
        links = json.loads(ip_json)
    except ValueError:
        return None
    for link in links if isinstance(links, list) else []:
        if isinstance(link, dict) and str(link.get("address", "")).lower() == mac.lower():
            return link
    return None


class GuestSource(Protocol):
    """Finds the guests a suite or scenario names (hvnet's lab is one)."""

    def require(self, topology: Topology, names: list[str]) -> dict[str, GuestEndpoint]:
        """``names`` resolved, or a :class:`~appliance.core.errors.UsageError` that says how to bring them up."""
        ...


class FlowCollector(Protocol):
    """An sFlow or IPFIX collector someone started for hvnet (the lab's pmacct, see appliance.lab.collector)."""

    kind: str
    port: int
    out: Path  # the JSON lines it writes: ``packets`` and ``bytes`` per record

    @property
    def target(self) -> str: ...

    def stop(self) -> None: ...


class CollectorSource(Protocol):
    """Starts collectors beside the switch (hvnet's lab does): a monitored suite case needs one."""

    def start_collector(self, kind: str, run_dir: Path) -> FlowCollector:
        """A collector of ``kind`` (sflow or ipfix) listening where ovs-vswitchd can send; LabError if not."""
        ...
