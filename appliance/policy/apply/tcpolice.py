"""Ingress policing and egress shaping by tc, as OVS installs them: whether a kernel can, and what it did.

``ingress_policing_rate`` makes OVS 3.1 put a ``matchall`` filter with a ``police`` action on the
interface's ingress (``tc -s filter show dev vif1.0 ingress`` on the kernel datapath shows ``pref 1
matchall`` ... ``police 0x1 rate 10240Kbit burst 128Kb``); a QoS of type ``linux-htb`` makes it an
``htb`` root qdisc.  The probe tries what OVS installs, and the reading takes tc's own counters of
that police action (packets it saw and dropped) as the evidence that the limit is enforced; an htb's
root class (``tc class show``) carries the rate the kernel shapes to.

The reading parses ``tc -s`` text: iproute2 6.1 gives JSON for these filters, but its police action
there has no rate and no burst (``tests/unit/data/tc-filter-matchall-police-after.json``).
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from appliance.core.errors import HvnetError
from appliance.core.runner import CommandRunner

BOOT_ID = "/proc/sys/kernel/random/boot_id"
# OVS 3.1's ingress policer (netdev-linux's matchall policer), at a probe's rate.
PROBE_FILTER = ("protocol", "all", "prio", "1", "matchall",
                "action", "police", "rate", "1000kbit", "burst", "100k", "mtu", "64kb", "drop")  # fmt: skip
_UNSAFE = re.compile(r"[^A-Za-z0-9._@-]")


# -- the probe ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoliceAnswer:
    """The probe's answer, and whether it is the kernel's own (cached for the boot) or "no" for now."""

    works: bool
    cached: Path | None  # where the kernel's answer is kept; None: not cached, asked again next time
    why: str = ""  # when not cached: why the probe gave no answer of the kernel's


def tc_police_works(runner: CommandRunner, cache_dir: str | Path = "/run/hvnet") -> bool:
    """Whether this host's kernel runs the tc police action the way OVS installs it (see :func:`tc_police`)."""
    return tc_police(runner, cache_dir).works


def tc_police(runner: CommandRunner, cache_dir: str | Path = "/run/hvnet") -> PoliceAnswer:
    """Whether this host's kernel runs the tc police action the way OVS installs it, and how that is known.

    Probed on a veth pair in a throwaway namespace -- the only reliable answer (the modules may be
    built in, absent or blacklisted) -- and cached under what the answer depends on: the host (a
    remote one by name), its boot and its kernel release.  Only the kernel's own answer is cached:
    a "no" because the probe could not run (no root, ``ip netns add`` refused, SSH gone) is given
    for now and asked again next time, so one failed attempt cannot poison later ones.  Without
    root the answer is "no": hvnet then prefers meters, which it can verify.
    """
    if runner.local and os.geteuid() != 0:
        return PoliceAnswer(False, None, "the probe needs root")
    key = cache_key(runner)
    cache = Path(cache_dir) / f"tc-police-{key}" if key is not None else None
    if cache is not None:
        try:
            return PoliceAnswer(cache.read_text().strip() == "yes", cache)
        except OSError:
            pass
    if runner.which_optional("tc") is None:
        return PoliceAnswer(False, None, "tc is not installed")
    answer = probe(runner)
    if answer is None:
        return PoliceAnswer(False, None, "the probe could not be set up (namespace, veth or connection)")
    if cache is None:
        return PoliceAnswer(answer, None, "the host's boot id or kernel release could not be read")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text("yes\n" if answer else "no\n")
    except OSError as exc:
        return PoliceAnswer(answer, None, f"{cache} could not be written: {exc.strerror}")
    return PoliceAnswer(answer, cache)


def cache_key(runner: CommandRunner) -> str | None:
    """``HOST-RELEASE-BOOTID`` (``local`` for this machine); None when the host cannot say (then nothing is cached)."""
    boot_id = (runner.read_text(BOOT_ID) or "").strip()
    if runner.local:
        release, host = os.uname().release, "local"
    else:
        try:
            res = runner.run(["uname", "-r"], check=False, timeout=30)
        except (HvnetError, OSError):
            return None
        release, host = (res.stdout.strip() if res.returncode == 0 else ""), str(getattr(runner, "host", ""))
    if not (boot_id and release and host):
        return None
    return _UNSAFE.sub("_", f"{host}-{release}-{boot_id}")


def probe(runner: CommandRunner) -> bool | None:
    """The kernel's answer (True/False), or None when the probe could not ask it.

    Creating the namespace and the veth pair is the probe's own scaffolding: failing there says
    nothing about policing.  Once they exist, as root in a namespace of our own, a refused ingress
    qdisc or police filter is the kernel's answer.
    """
    ns = f"hvnet-tcprobe-{os.getpid()}-{secrets.token_hex(3)}"  # hosts probed at once may share a kernel (a lab)
    scaffold = [["ip", "netns", "add", ns], ["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"]]
    answer: bool | None = None
    try:
        if all(runner.run(s, check=False, timeout=10).returncode == 0 for s in scaffold):
            steps = [
                ["tc", "-n", ns, "qdisc", "add", "dev", "p0", "handle", "ffff:", "ingress"],
                ["tc", "-n", ns, "filter", "add", "dev", "p0", "parent", "ffff:", *PROBE_FILTER],
            ]
            results = [runner.run(s, check=False, timeout=10).returncode for s in steps]
            answer = None if 255 in results else all(rc == 0 for rc in results)  # 255: the connection, not tc
    except (HvnetError, OSError):
        answer = None
    finally:
        try:
            runner.run(["ip", "netns", "del", ns], check=False, timeout=10)
        except (HvnetError, OSError):
            pass
    return answer


# -- what tc shows --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Police:
    """One police action on an ingress, with tc's own counters (``Sent ... pkt`` counts every packet it saw)."""

    classifier: str  # "matchall" as OVS 3.x installs; "basic" as older OVS did
    rate_kbit: int | None  # None: no byte rate (a packet-rate policer)
    burst_bytes: int | None
    packets: int
    dropped: int
    overlimits: int

    @property
    def passed(self) -> int:
        return self.packets - self.dropped

    def describe(self) -> str:
        """``police (matchall) rate 10240 kbit/s burst 131072 B: 2002 passed, 35 dropped`` or "installed, never hit"."""
        rate = f"rate {self.rate_kbit} kbit/s" if self.rate_kbit is not None else "no byte rate"
        burst = f" burst {self.burst_bytes} B" if self.burst_bytes is not None else ""
        seen = (
            "installed, never hit"
            if self.packets == 0
            else f"{self.passed} packets passed, {self.dropped} dropped"
            + (" (policed)" if self.dropped else " (traffic stayed within the rate)")
        )
        return f"tc police ({self.classifier}) {rate}{burst}: {seen}"


@dataclass(frozen=True)
class Htb:
    """An htb root qdisc on an egress, with its counters (overlimits: the times it held packets back)."""

    handle: str
    packets: int
    dropped: int
    overlimits: int

    def describe(self) -> str:
        return (
            f"htb qdisc {self.handle} installed: {self.packets} packets sent, {self.dropped} dropped, "
            f"held back {self.overlimits} times"
        )


@dataclass(frozen=True)
class TcReading:
    """An interface's tc state; ``police``/``htb`` are None when tc could not read that direction."""

    police: tuple[Police, ...] | None
    htb: Htb | None
    egress_read: bool

    @property
    def htb_installed(self) -> bool | None:
        return (self.htb is not None) if self.egress_read else None


_FILTER = re.compile(r"^filter\b.*\b(?:pref|prio) \d+ (\w+)")
_POLICE = re.compile(r"\bpolice 0x[0-9a-f]+(?: rate (\S+))?(?: .*?\bburst (\S+))?")
_SENT = re.compile(r"^\s*Sent \d+ bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)")
_QDISC = re.compile(r"^qdisc (\w+) (\S+)")
_RATE_UNIT = {"bit": 0.001, "Kbit": 1, "Mbit": 1000, "Gbit": 1_000_000, "Tbit": 1_000_000_000}
_SIZE_UNIT = {"b": 1, "Kb": 1024, "Mb": 1024**2, "Gb": 1024**3}


def parse_police(text: str) -> tuple[Police, ...]:
    """The police actions in ``tc -s filter show dev IF ingress``, each with the counters that follow it."""
    out: list[Police] = []
    classifier, pending = "", None
    for line in text.splitlines():
        if m := _FILTER.match(line):
            classifier = m.group(1)
        elif m := _POLICE.search(line):
            pending = (classifier, _quantity(m.group(1), _RATE_UNIT), _quantity(m.group(2), _SIZE_UNIT))
        elif (m := _SENT.match(line)) and pending is not None:
            cls, rate, burst = pending
            out.append(Police(cls, None if rate is None else round(rate), None if burst is None else round(burst),
                              int(m.group(1)), int(m.group(2)), int(m.group(3))))  # fmt: skip
            pending = None
    return tuple(out)


def parse_htb(text: str) -> Htb | None:
    """The htb root qdisc in ``tc -s qdisc show dev IF``, with its counters; None when there is none."""
    found: Htb | None = None
    handle: str | None = None  # of the htb root qdisc whose counters come next
    for line in text.splitlines():
        if m := _QDISC.match(line):
            handle = m.group(2) if m.group(1) == "htb" and " root " in line else None
        elif (m := _SENT.match(line)) and handle is not None and found is None:
            found = Htb(handle, int(m.group(1)), int(m.group(2)), int(m.group(3)))
            handle = None
    return found


_HTB_ROOT_CLASS = re.compile(r"^class htb \S+ root .*?\brate (\S+)")


def parse_htb_rate_kbit(text: str) -> int | None:
    """The rate of the htb root class in ``tc class show dev IF`` (kbit/s): the shaping rate the kernel has.

    OVS's linux-htb puts the QoS's max-rate on the root class (``class htb 1:fffe root rate 10240Kbit``) and
    the queue's own class under it; None when there is no htb root class."""
    for line in text.splitlines():
        if m := _HTB_ROOT_CLASS.match(line):
            rate = _quantity(m.group(1), _RATE_UNIT)
            return None if rate is None else round(rate)
    return None


def _quantity(text: str | None, units: dict[str, float]) -> float | None:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]+)", text or "")
    if m is None or m.group(2) not in units:
        return None
    return float(m.group(1)) * units[m.group(2)]


def tc_enforcement(runner: CommandRunner, interface: str) -> TcReading:
    """An interface's police actions (ingress) and htb qdisc (egress), with their counters, read now."""
    if runner.which_optional("tc") is None:
        return TcReading(None, None, False)
    filt = runner.run(["tc", "-s", "filter", "show", "dev", interface, "ingress"], check=False, timeout=10)
    qdisc = runner.run(["tc", "-s", "qdisc", "show", "dev", interface], check=False, timeout=10)
    police = parse_police(filt.stdout) if filt.returncode == 0 else None
    egress_read = qdisc.returncode == 0
    return TcReading(police, parse_htb(qdisc.stdout) if egress_read else None, egress_read)
