"""The traffic method: real ARP broadcasts, real captures, inside the guests.

Order matters and is enforced: neighbour caches flushed, a capture armed on
every guest (``arp or (vlan and arp)``: tagged frames reach trunk ports),
*then* every probe goes out in one window -- each guest asks who-has for
every other guest's address and for one unused address (a pure broadcast) --
and only then are the captures stopped.  Probes are written to raw packet
sockets opened inside each guest's namespace, so hundreds of probes cost
milliseconds, not one process each.  A QEMU guest does the same from inside
the VM: its capture streams back over the agent channel (``tcpdump -w -``)
and one small sender in the guest writes all its probes to a raw socket.  A
namespace on another host (a VM host's guest) captures and sends there, as
jobs over that host's connection, with ``arping`` -- tagged too, from the
guest's VLAN sub-interfaces (:mod:`.nstraffic`).

A positive control is sent to every guest: an ARP frame the switch puts
straight onto the guest's port (OpenFlow packet-out).  A guest whose capture
lacks it -- and heard no one else -- cannot prove a "No": its cells are
"unknown", never "No".

The window has no fixed length.  It opens once every tcpdump says it is
listening, and closes once every capture shows a *closing* control -- a
second packet-out frame, put on each port after the last probe (frames
queue on a port in order: what the switch forwarded before it is captured
before it) -- and no capture has grown for ``QUIET_S`` (probes still queued
at the switch's ingress, replies).  A capture that lacks the closing control
or was still growing after ``SETTLE_MAX_S``, or whose tcpdump reports
dropped packets or no counts at all, cannot prove a "No" either.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import select
import signal
import socket
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from appliance.core.errors import CommandFailed
from appliance.core.runner import CommandRunner
from appliance.core.safedirs import create_new, make_private
from appliance.endpoints.guests import GuestEndpoint
from appliance.isolation import nstraffic, vmtraffic
from appliance.isolation.pcap import ArpFrame, TcpdumpCounts, parse_tcpdump_counts, read_arp
from appliance.switch.host import Host

CLONE_NEWNET = 0x40000000
CONTROL_MAC = "02:68:76:6e:65:74"  # "hvnet": the positive-control frames' sender
CAPTURE_FILTER = "arp or (vlan and arp)"
CLOSING_TARGET = "0.0.0.0"  # the closing control asks for no one's address: nobody answers it
QUIET_S = 0.1  # no capture grew for this long: the switch has nothing more in flight
SETTLE_MAX_S = 2.0  # longest wait after the last probe for the closing controls and the quiet
POLL_S = 0.01


@dataclass(frozen=True)
class Endpoint:
    """A guest as the traffic method needs it: the guest, and where its VIF is on the switch."""

    guest: GuestEndpoint
    ip: str  # the address it probes from (no prefix length)
    bridge: str
    ofport: int | None
    switch: Host | None = None  # the hypervisor whose switch holds the VIF, when not the run's host
    tagged: tuple[int, ...] = ()  # VLANs it also sends on tagged, from its sub-interfaces eth0.V (a VM host's)

    @property
    def name(self) -> str:
        return self.guest.name

    @property
    def mac(self) -> str:
        return self.guest.mac

    @property
    def netns(self) -> str:
        return self.guest.netns or ""

    @property
    def channel(self) -> str | None:
        return self.guest.channel

    @property
    def in_remote_netns(self) -> bool:
        """A namespace on another host (a VM host's guest): its part runs there (:mod:`.nstraffic`)."""
        return self.guest.remote and self.guest.access is None


# Runs inside a QEMU guest: argv = repetitions, then the frames in hex.
_GUEST_SENDER = (
    "import socket,sys\n"
    "s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW);s.bind(('eth0',0))\n"
    "fs=[bytes.fromhex(x) for x in sys.argv[2:]]\n"
    "for _ in range(int(sys.argv[1])):\n"
    " for f in fs:s.send(f)\n"
)


@dataclass
class Capture:
    guest: str
    pcap: Path
    frames: list[ArpFrame] = field(default_factory=list)
    error: str | None = None
    counts: TcpdumpCounts | None = None  # what tcpdump said when it stopped; None: it said nothing
    closing_sent: bool = False  # a closing control was put on the guest's port after the last probe
    settled: bool = False  # the pcap had stopped growing (for QUIET_S) when the capture was stopped

    @property
    def closed(self) -> bool:
        """The capture shows the closing control: it saw everything forwarded to it before that."""
        return any(is_closing_control(f) for f in self.frames)

    @property
    def doubt(self) -> str | None:
        """Why a frame missing from this capture does not prove it never came, or None."""
        if self.counts is None:
            return f"{self.guest}'s tcpdump printed no packet counts when it stopped, so lost frames are not ruled out"
        if self.counts.dropped:
            return f"{self.guest}'s tcpdump reported {self.counts.describe_drops()}, so a frame may have been lost"
        if not self.closing_sent:
            return f"no closing control could be put on {self.guest}'s port, so the end of its capture is not confirmed"
        if not self.closed:
            return (
                f"{self.guest}'s capture does not show the closing control sent after the last probe "
                f"(waited up to {SETTLE_MAX_S:g} s), so a late frame may be missing"
            )
        if not self.settled:
            return (
                f"{self.guest}'s capture was still growing when it was stopped ({SETTLE_MAX_S:g} s after "
                "the last probe), so a late frame may be missing"
            )
        return None


def is_closing_control(frame: ArpFrame) -> bool:
    return frame.sender_mac == CONTROL_MAC and frame.target_ip == CLOSING_TARGET


@dataclass
class TrafficRun:
    captures: dict[str, Capture]
    down: dict[str, str]  # guest -> reason it could not take part
    probes_sent: int
    window_s: float
    controls_sent: list[str]
    closing_sent: list[str] = field(default_factory=list)
    settle_s: float = 0.0  # from the closing controls to the end of the window (at most SETTLE_MAX_S)


def arp_request(src_mac: str, src_ip: str, target_ip: str) -> bytes:
    """A broadcast ARP who-has, padded to the 60-byte Ethernet minimum."""
    mac = bytes.fromhex(src_mac.replace(":", ""))
    frame = (
        b"\xff" * 6
        + mac
        + b"\x08\x06"
        + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1)
        + mac
        + ipaddress.IPv4Address(src_ip).packed
        + bytes(6)
        + ipaddress.IPv4Address(target_ip).packed
    )
    return frame + bytes(60 - len(frame))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


def open_raw_socket(netns: str, ifname: str = "eth0") -> socket.socket:
    """A raw packet socket on ``ifname`` inside ``netns``.

    A socket belongs to the namespace it was created in, so a short-lived
    thread enters the namespace (setns affects only the calling thread),
    creates the socket and exits; the socket stays usable from anywhere.
    """
    result: dict[str, object] = {}

    def enter() -> None:
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if _libc().setns(fd, CLONE_NEWNET) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns({netns}): {os.strerror(err)}")
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((ifname, 0))
            result["sock"] = s
        except OSError as exc:
            result["error"] = exc
        finally:
            os.close(fd)

    t = threading.Thread(target=enter, name=f"netns-{netns}")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["sock"]  # type: ignore[return-value]


def _in_guest(runner: CommandRunner, ep: Endpoint, argv: list[str], timeout: float = 10.0) -> tuple[int, str]:
    """Run ``argv`` in a QEMU guest; (exit status, output), or (-1, why) if the channel failed."""
    try:
        res = runner.run(ep.guest.argv(argv, stdin=False), check=False, timeout=timeout)
    except CommandFailed:
        return -1, f"{argv[0]} did not finish within {timeout:g} s"
    if res.returncode == 255 and res.stderr.startswith("gexec:"):  # the channel's own failure, not the command's
        return -1, res.stderr.partition(":")[2].strip()
    return res.returncode, res.stdout


def guest_down_reason(runner: CommandRunner, ep: Endpoint) -> str | None:
    """Why ``ep`` cannot send or capture, or None if it can."""
    if ep.channel:
        rc, out = _in_guest(runner, ep, ["ip", "-o", "link", "show", "eth0"])
        if rc == -1:
            return f"the guest's agent channel does not answer: {out}"
        res = subprocess.CompletedProcess([], rc, out, "")
    elif not os.path.exists(f"/run/netns/{ep.netns}"):
        return f"namespace {ep.netns} does not exist"
    else:
        res = runner.run(["ip", "-n", ep.netns, "-o", "link", "show", "eth0"], check=False)
    if res.returncode != 0:
        return "eth0 is missing"
    flags = res.stdout.partition("<")[2].partition(">")[0].split(",")
    if "UP" not in flags:
        return "eth0 is down"
    return None


def _arm_captures(
    runner: CommandRunner, endpoints: list[Endpoint], out_dir: Path, timeout: float
) -> dict[str, tuple[subprocess.Popen, Capture]]:
    tcpdump = runner.which("tcpdump")
    running: dict[str, tuple[subprocess.Popen, Capture]] = {}
    opts = ["-i", "eth0", "-U", "--immediate-mode", "-nn", "-s", "128"]
    for ep in endpoints:
        pcap = out_dir / f"{ep.name}.pcap"
        # The pcap streams out on tcpdump's stdout into a file hvnet creates, private (0600) whatever the
        # umask -- from a VM over its channel, or from a namespace's tcpdump.
        pcap.unlink(missing_ok=True)  # a capture of an earlier run into the same directory (or a link)
        argv = ["tcpdump", *opts, "-w", "-", CAPTURE_FILTER]
        with os.fdopen(create_new(pcap), "wb") as sink:
            if ep.channel:
                p = runner.popen(ep.guest.argv(argv, stdin=False), stdout=sink, stderr=subprocess.PIPE)
            else:
                p = runner.popen(ep.guest.argv([tcpdump, *argv[1:]]), stdout=sink, stderr=subprocess.PIPE)
        running[ep.name] = (p, Capture(ep.name, pcap))
    # tcpdump says "listening on ..." once its socket is open: only then is a
    # probe sure to be seen.
    deadline = time.monotonic() + timeout
    pending = {p.stderr.fileno(): (name, p) for name, (p, _c) in running.items() if p.stderr}
    while pending and time.monotonic() < deadline:
        ready, _, _ = select.select(list(pending), [], [], max(0.0, deadline - time.monotonic()))
        for fd in ready:
            name, p = pending.pop(fd)
            line = p.stderr.readline().decode(errors="replace") if p.stderr else ""
            if "listening on" not in line:
                running[name][1].error = f"tcpdump did not start: {line.strip() or 'no output'}"
    for name, _p in pending.values():
        running[name][1].error = f"tcpdump not ready within {timeout:g} s"
    return running


def _send_control(host: Host, ep: Endpoint) -> bool:
    if ep.ofport is None or ep.ofport < 1:
        return False
    frame = arp_request(CONTROL_MAC, "0.0.0.0", ep.ip).hex()
    return _packet_out(ep.switch or host, ep.bridge, frame, [ep.ofport])


def _packet_out(host: Host, bridge: str, frame_hex: str, ofports: list[int]) -> bool:
    actions = ",".join(f"output:{p}" for p in ofports)
    res = host.runner.run(
        ["ovs-ofctl", "packet-out", bridge, f"in_port=controller,packet={frame_hex},actions={actions}"],
        env=host.ovs_env,
        check=False,
    )
    return res.returncode == 0


def _send_closing(host: Host, live: list[Endpoint]) -> list[str]:
    """Put the closing control on every live guest's port: one packet-out per bridge.  Who got it."""
    frame = arp_request(CONTROL_MAC, "0.0.0.0", CLOSING_TARGET).hex()
    by_bridge: dict[tuple[int, str], list[Endpoint]] = {}  # (whose switch, bridge)
    switches = {id(ep.switch or host): ep.switch or host for ep in live}
    for ep in live:
        if ep.ofport is not None and ep.ofport >= 1:
            by_bridge.setdefault((id(ep.switch or host), ep.bridge), []).append(ep)
    sent = []
    for (switch, bridge), eps in by_bridge.items():
        if _packet_out(switches[switch], bridge, frame, [ep.ofport for ep in eps if ep.ofport is not None]):
            sent += [ep.name for ep in eps]
    return sent


def _settle(running: dict[str, tuple[subprocess.Popen, Capture]], closing: list[str]) -> float:
    """Wait until the captures in ``closing`` hold the closing control and no capture grew for
    ``QUIET_S`` -- at most ``SETTLE_MAX_S``; the time waited.  Marks each quiet capture ``settled``.

    Only a wait: the verdict reads the frames afterwards.  The control's bytes
    are looked for in the growing pcaps (tcpdump -U writes each packet out).
    """
    marker = arp_request(CONTROL_MAC, "0.0.0.0", CLOSING_TARGET)[:42]  # Ethernet + ARP, no padding
    started = now = time.monotonic()
    sizes: dict[str, int] = {}
    grew_at = dict.fromkeys(running, started)
    missing = {name for name in closing if name in running}
    while True:
        now = time.monotonic()
        for name, (_p, cap) in running.items():
            size = _size(cap.pcap)
            if size != sizes.get(name):
                sizes[name], grew_at[name] = size, now
        missing = {name for name in missing if marker not in _read(running[name][1].pcap)}
        quiet = all(now - t >= QUIET_S for t in grew_at.values())
        if (quiet and not missing) or now - started >= SETTLE_MAX_S:
            break
        time.sleep(POLL_S)
    for name, (_p, cap) in running.items():
        cap.settled = now - grew_at[name] >= QUIET_S
    return now - started


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def run(
    host: Host,
    endpoints: list[Endpoint],
    unused_ips: dict[str, str],
    probes_per_target: int,
    out_dir: Path,
) -> TrafficRun:
    """Capture on every guest, probe from every guest, collect the frames (a real VM's part through its own
    access: :mod:`.vmtraffic`; a namespace's on another host through that host's: :mod:`.nstraffic`)."""
    runner = host.local_runner
    make_private(out_dir)
    down = {ep.name: why for ep in endpoints if ep.guest.access is None and not ep.in_remote_netns
            for why in [guest_down_reason(runner, ep)] if why}  # fmt: skip
    down.update({ep.name: why for ep in endpoints if ep.in_remote_netns
                 for why in [nstraffic.down_reason(ep.switch or host, ep.netns, nstraffic.interfaces(ep.tagged))]
                 if why})  # fmt: skip
    vm_if: dict[str, str] = {}
    for ep in endpoints:
        if ep.guest.access is not None:
            why, ifname = vmtraffic.down_reason(ep.guest)
            if why:
                down[ep.name] = why
            else:
                vm_if[ep.name] = ifname
    live = [ep for ep in endpoints if ep.name not in down]
    for ep in live:
        if ep.name in vm_if:
            vmtraffic.flush_neighbours(ep.guest, vm_if[ep.name])
        elif ep.in_remote_netns:
            (ep.switch or host).runner.run(["ip", "-n", ep.netns, "neigh", "flush", "all"], check=False, timeout=30)
        elif ep.channel:
            _in_guest(runner, ep, ["ip", "neigh", "flush", "all"])
        else:
            runner.run(["ip", "-n", ep.netns, "neigh", "flush", "all"], check=False)
    frames = {
        ep.name: [arp_request(ep.mac, ep.ip, other.ip) for other in endpoints if other is not ep]
        + ([arp_request(ep.mac, ep.ip, unused_ips[ep.name])] if ep.name in unused_ips else [])
        for ep in live
    }
    vm_caps = [vmtraffic.VmCapture(ep.guest, vm_if[ep.name]) for ep in live if ep.name in vm_if]
    ns_caps: dict[int, nstraffic.HostCaptures] = {}
    try:
        for ep in live:
            if ep.in_remote_netns and id(ep.switch or host) not in ns_caps:
                ns_caps[id(ep.switch or host)] = nstraffic.HostCaptures(ep.switch or host)
        targets = {ep.name: [o.ip for o in endpoints if o is not ep] + ([unused_ips[ep.name]] if ep.name in unused_ips
                                                                         else []) for ep in live}  # fmt: skip
        return _window(host, live, frames, probes_per_target, out_dir, vm_caps, down,
                       _NsPart(ns_caps, targets, host))  # fmt: skip
    finally:
        vmtraffic.close(vm_caps)
        for caps in ns_caps.values():
            caps.close()


@dataclass
class _NsPart:
    """The run's part in namespaces on other hosts: one :class:`nstraffic.HostCaptures` per host."""

    caps: dict[int, nstraffic.HostCaptures]
    targets: dict[str, list[str]]  # each sender's who-has targets
    host: Host

    def of(self, ep: Endpoint) -> nstraffic.HostCaptures:
        return self.caps[id(ep.switch or self.host)]

    def arm(self, live: list[Endpoint], timeout: float) -> None:
        for key, caps in self.caps.items():
            caps.arm([(ep.name, ep.netns) for ep in live if ep.in_remote_netns and id(ep.switch or self.host) == key],
                     CAPTURE_FILTER, timeout)  # fmt: skip

    def probe(self, live: list[Endpoint], repeat: int) -> int:
        """Every remote sender's probes (each host's jobs at once, the hosts in turn); how many went out."""
        sent = 0
        for key, caps in self.caps.items():
            mine = [ep for ep in live if ep.in_remote_netns and id(ep.switch or self.host) == key]
            jobs = [j for i, ep in enumerate(mine) for j in nstraffic.send_jobs(
                i, ep.netns, nstraffic.interfaces(ep.tagged), ep.ip, self.targets[ep.name], repeat)]  # fmt: skip
            done = caps.probe(jobs)
            per_job = {j.name: repeat * len(j.argv[8:]) for j in jobs}  # argv[8:]: its targets
            sent += sum(per_job[n] for n in done)
        return sent

    def finish(self, live: list[Endpoint], closing: list[str], out_dir: Path) -> dict[str, Capture]:
        """Wait for quiet, stop every capture, bring its frames back here as a pcap."""
        for caps in self.caps.values():
            caps.settle(QUIET_S, SETTLE_MAX_S)
        for caps in self.caps.values():
            caps.stop()
        out = {}
        for ep in live:
            if not ep.in_remote_netns:
                continue
            got = self.of(ep).caps.get(ep.name)
            cap = Capture(ep.name, out_dir / f"{ep.name}.pcap", closing_sent=ep.name in closing)
            cap.error = self.of(ep).write(ep.name, cap.pcap) if got is not None else "not started"
            if got is not None:
                cap.counts, cap.settled = got.counts, got.settled
            out[ep.name] = _read_frames(cap)
        return out


def _window(
    host: Host,
    live: list[Endpoint],
    frames: dict[str, list[bytes]],
    repeat: int,
    out_dir: Path,
    vm_caps: list[vmtraffic.VmCapture],
    down: dict[str, str],
    ns: _NsPart,
) -> TrafficRun:
    """Arm every capture, send every probe and the closing controls, wait for quiet, stop and read back."""
    runner = host.local_runner
    here = [ep for ep in live if ep.guest.access is None and not ep.in_remote_netns]
    running = _arm_captures(runner, here, out_dir, timeout=10.0)
    vmtraffic.arm(vm_caps, CAPTURE_FILTER, timeout=10.0)
    ns.arm(live, timeout=30.0)
    started = time.monotonic()
    closing: list[str] = []
    ns_captures: dict[str, Capture] = {}
    try:
        controls = [ep.name for ep in live if _send_control(host, ep)]
        probes = _probe(runner, here, frames, repeat)
        probes += vmtraffic.probe({c.guest.name: (c.guest, c.ifname) for c in vm_caps if c.error is None}, frames,
                                  repeat)  # fmt: skip
        probes += ns.probe(live, repeat)
        closing = _send_closing(host, live)
        settle = _settle(running, closing)
        vm_quiet = vmtraffic.settle([c for c in vm_caps if c.error is None], QUIET_S, SETTLE_MAX_S)
    finally:
        window = time.monotonic() - started
        _stop_captures(running)
        for c in vm_caps:
            vmtraffic.stop(c)
        ns_captures = ns.finish(live, closing, out_dir)
    for name in closing:
        if name in running:
            running[name][1].closing_sent = True
    captures = _read_captures(running)
    for c in vm_caps:
        cap = Capture(c.guest.name, out_dir / f"{c.guest.name}.pcap", closing_sent=c.guest.name in closing)
        cap.error = c.error or vmtraffic.fetch(c, cap.pcap)
        cap.counts, cap.settled = vmtraffic.counts(c), vm_quiet.get(c.guest.name, False)
        captures[c.guest.name] = _read_frames(cap)
    captures.update(ns_captures)
    return TrafficRun(
        captures=captures,
        down=down,
        probes_sent=probes,
        window_s=window,
        controls_sent=controls,
        closing_sent=closing,
        settle_s=settle,
    )


def _probe(runner: CommandRunner, live: list[Endpoint], frames: dict[str, list[bytes]], repeat: int) -> int:
    """Every guest's probes, ``repeat`` times: raw sockets for namespaces, one sender inside each VM.
    Returns how many were sent (a VM's count only when its sender finished well)."""
    probes = 0
    sockets = {ep.name: open_raw_socket(ep.netns) for ep in live if not ep.channel}
    try:
        senders = [
            (runner.popen(ep.guest.argv(["python3", "-c", _GUEST_SENDER, str(repeat),
                                         *(f.hex() for f in frames[ep.name])], stdin=False),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE),
             repeat * len(frames[ep.name]))
            for ep in live if ep.channel
        ]  # fmt: skip
        for _ in range(repeat):
            for name, s in sockets.items():
                for frame in frames[name]:
                    s.send(frame)
                    probes += 1
        for p, count in senders:
            try:
                if p.wait(timeout=30) == 0:
                    probes += count
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    finally:
        for s in sockets.values():
            s.close()
    return probes


def _stop_captures(running: dict[str, tuple[subprocess.Popen, Capture]]) -> None:
    """SIGINT every tcpdump, then read what each printed when it stopped (its packet counts)."""
    for p, _c in running.values():
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    for p, cap in running.values():
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            cap.error = cap.error or "tcpdump did not stop"
        if p.stderr:
            cap.counts = parse_tcpdump_counts(p.stderr.read().decode(errors="replace"))
            p.stderr.close()


def _read_captures(running: dict[str, tuple[subprocess.Popen, Capture]]) -> dict[str, Capture]:
    return {name: _read_frames(cap) for name, (_p, cap) in running.items()}


def _read_frames(cap: Capture) -> Capture:
    """The capture with its ARP frames read from its pcap (or why they could not be)."""
    if cap.error is None:
        try:
            cap.frames = read_arp(cap.pcap)
        except (OSError, ValueError) as exc:
            cap.error = f"cannot read {cap.pcap}: {exc}"
    return cap
