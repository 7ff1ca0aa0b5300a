"""The traffic method inside real VMs: their captures and their probes, through each VM's own access.

A real VM (over SSH, or through libvirt's QEMU guest agent) has no namespace
hvnet can enter and no stream hvnet can hold open through the agent, so its
part of the method runs as :mod:`appliance.endpoints` jobs there: tcpdump
writes its pcap into the group's private work dir in the VM, "listening on"
is read back from its stderr before any probe goes out, its size is watched
until the captures are quiet, a SIGINT stops it (its packet counts then come
back on stderr, as for a local capture), and the pcap comes back as base64
text into the run's directory, where it is read like any other.  The probes
are one small sender per VM writing every frame to a raw socket on the VM's
data interface -- the one that carries its VIF's MAC, found with ``ip -j
link``, never the management link the access uses.
"""

from __future__ import annotations

import base64
import binascii
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import HvnetError
from appliance.core.safedirs import create_new
from appliance.endpoints.guests import GuestEndpoint, link_with_mac
from appliance.endpoints.jobs import Job
from appliance.isolation.pcap import parse_tcpdump_counts

# argv: interface, repetitions, then the frames in hex (the same sender a lab QEMU guest runs)
SENDER = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW);s.bind((sys.argv[1],0))\n"
    "fs=[bytes.fromhex(x) for x in sys.argv[3:]]\n"
    "for _ in range(int(sys.argv[2])):\n"
    " for f in fs:s.send(f)\n"
)
LISTEN_POLL_S = 0.1


def ifname_of(ip_json: str, mac: str) -> Optional[str]:
    """The interface whose MAC is ``mac`` in ``ip -j link`` (or ``addr``) output (pure; None: none)."""
    name = (link_with_mac(ip_json, mac) or {}).get("ifname")
    return name if isinstance(name, str) and name else None


@dataclass
class VmCapture:
    """One VM's capture: its group in the VM, and what came back."""

    guest: GuestEndpoint
    ifname: str
    group: Any = None
    error: Optional[str] = None
    stderr: str = ""

    @property
    def runner(self) -> Any:
        assert self.guest.access is not None
        return self.guest.access.runner

    @property
    def pcap(self) -> str:
        return f"{self.group.dir}/cap.pcap"


def down_reason(guest: GuestEndpoint) -> tuple[Optional[str], str]:
    """(why the VM cannot send or capture, or None; its data interface)."""
    assert guest.access is not None
    try:
        res = guest.access.runner.run(["ip", "-j", "link", "show"], check=False, timeout=15)
    except HvnetError as exc:
        return f"{guest.access.label} does not answer: {exc}", ""
    link = link_with_mac(res.stdout, guest.mac) if res.returncode == 0 else None
    name = link.get("ifname") if link is not None else None
    if link is None or not isinstance(name, str) or not name:
        return f"no interface in {guest.access.label} carries its VIF's MAC {guest.mac}", ""
    if "UP" not in (link.get("flags") or []):
        return f"{name} is down in {guest.access.label}", name
    for tool in ("tcpdump", "python3"):
        if guest.access.runner.which_optional(tool) is None:
            return f"{tool} is not installed in {guest.access.label} (it captures and sends there)", name
    return None, name


def flush_neighbours(guest: GuestEndpoint, ifname: str) -> None:
    assert guest.access is not None
    guest.access.runner.run(["ip", "neigh", "flush", "dev", ifname], check=False, timeout=15)


def arm(caps: list[VmCapture], bpf: str, timeout: float) -> None:
    """Start every VM's tcpdump (one group each) and wait until each says it listens."""
    for cap in caps:
        assert cap.guest.access is not None
        cap.group = cap.guest.access.launcher.group("isolation")
        argv = ("tcpdump", "-i", cap.ifname, "-U", "--immediate-mode", "-nn", "-s", "128", "-w", cap.pcap, bpf)
        try:
            cap.group.start([Job("cap", argv)], hold=False, ready_timeout=timeout)
        except HvnetError as exc:
            cap.error = f"tcpdump did not start: {exc}"
    deadline = time.monotonic() + timeout
    pending = [c for c in caps if c.error is None]
    while pending and time.monotonic() < deadline:
        for cap in list(pending):
            err = cap.group.read_text("cap.err") or ""
            if "listening on" in err:
                pending.remove(cap)
            elif cap.group.poll().get("cap") is not None:
                cap.error = f"tcpdump did not start: {err.strip().splitlines()[-1] if err.strip() else 'no output'}"
                pending.remove(cap)
        time.sleep(LISTEN_POLL_S)
    for cap in pending:
        cap.error = f"tcpdump not ready within {timeout:g} s"


def probe(guests: dict[str, tuple[GuestEndpoint, str]], frames: dict[str, list[bytes]], repeat: int) -> int:
    """Each VM's probes from its own sender; how many went out (a VM's only when its sender finished well)."""
    sent = 0
    for name, (guest, ifname) in guests.items():
        assert guest.access is not None
        argv = ["python3", "-c", SENDER, ifname, str(repeat), *(f.hex() for f in frames[name])]
        try:
            if guest.access.runner.run(argv, check=False, timeout=30).returncode == 0:
                sent += repeat * len(frames[name])
        except HvnetError:
            continue
    return sent


def settle(caps: list[VmCapture], quiet_s: float, max_s: float) -> dict[str, bool]:
    """Wait until no VM's pcap grew for ``quiet_s`` (at most ``max_s``); which ones were quiet."""
    started = time.monotonic()
    grew_at = {id(c): started for c in caps}
    last: dict[int, int] = {}
    while True:
        now = time.monotonic()
        for cap in caps:
            size = _size(cap)
            if size != last.get(id(cap)):
                last[id(cap)], grew_at[id(cap)] = size, now
        if all(now - t >= quiet_s for t in grew_at.values()) or now - started >= max_s:
            return {c.guest.name: now - grew_at[id(c)] >= quiet_s for c in caps}
        time.sleep(max(quiet_s / 2, 0.05))


def _size(cap: VmCapture) -> int:
    if cap.error is not None:
        return -1
    try:
        res = cap.runner.run(["stat", "-c", "%s", cap.pcap], check=False, timeout=15)
    except HvnetError:
        return -1
    text = res.stdout.strip()
    return int(text) if res.returncode == 0 and text.isdigit() else -1


def stop(cap: VmCapture) -> None:
    """SIGINT to tcpdump (it prints its counts), then its stderr read back."""
    if cap.group is None or cap.error is not None:
        return
    from appliance.endpoints import wait_all

    cap.group.signal(["cap"], "INT")
    wait_all(cap.group, ["cap"], 5.0, lambda: False)
    cap.stderr = cap.group.read_text("cap.err") or ""


def fetch(cap: VmCapture, local: Path) -> Optional[str]:
    """The VM's pcap into ``local`` (created private, never through a link); why not, or None."""
    if cap.group is None:
        return "no capture"
    try:
        res = cap.runner.run(["base64", cap.pcap], check=False, timeout=60)
        data = base64.b64decode(res.stdout, validate=False) if res.returncode == 0 else None
    except (HvnetError, binascii.Error, ValueError) as exc:
        return f"the pcap could not be read back: {exc}"
    if data is None:
        return f"the pcap could not be read back: base64 exited {res.returncode}"
    local.unlink(missing_ok=True)
    with os.fdopen(create_new(local), "wb") as fh:
        fh.write(data)
    return None


def counts(cap: VmCapture) -> Any:
    return parse_tcpdump_counts(cap.stderr)


def close(caps: list[VmCapture]) -> None:
    for cap in caps:
        if cap.group is not None:
            try:
                cap.group.close()
            except HvnetError:
                pass
