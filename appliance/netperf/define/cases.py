"""A suite's ``cases:``: the variants its tests run under, one at a time.

A case is a policy fragment applied for its steps and restored after (a
policing rate, 0..8 mirrors), or monitoring (sFlow/IPFIX for the whole case,
or changed at set times: ``phases:``), with optional captures on monitor
guests and a collector guest whose counters say what a tunnel delivered.
Every problem is reported through the suite's checker, so the messages keep
their ``file:line: field``; nothing here reads the suite file itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from appliance.core import yamldoc
from appliance.netperf.define import cpus as cpus_key
from appliance.netperf.define.cpus import CpuPlacement
from appliance.netperf.define.monitoring import Monitor, Phase, parse_monitor, parse_phases
from appliance.netperf.define.perfstat import PerfStatSpec
from appliance.netperf.define.perfstat import parse as parse_perf_stat
from appliance.netperf.define.tests import MAX_DURATION_S, NAME, Checks, Test
from appliance.policy import Policy

SNAPLEN_RANGE = (14, 262144)  # the capture service's: an Ethernet header at least, tcpdump's maximum
BUFFER_KIB_RANGE = (64, 1_048_576)  # the capture service's tcpdump -B, KiB
_CASE_KEYS = {
    "name", "description", "policy", "monitor", "phases", "duration", "capture", "collector_guest", "cpus", "perf_stat",
}  # fmt: skip
_CAPTURE_KEYS = {"guests", "snaplen", "buffer_kib"}


@dataclass(frozen=True)
class CaseCapture:
    """Captures running on monitor guests' VIFs during every repetition of a case (hvnet's capture service)."""

    guests: tuple[str, ...]
    snaplen: Optional[int] = None  # bytes kept per packet; None: tcpdump's default (all of it)
    buffer_kib: Optional[int] = None  # the kernel's ring for each tcpdump (-B); None: libpcap's default (2 MiB)


@dataclass(frozen=True)
class Case:
    """A variant the tests run under: a policy fragment applied for its steps, restored after."""

    name: str
    description: str = ""
    policy: Optional[Policy] = None
    monitor: Optional[Monitor] = None  # sFlow/IPFIX for the case's steps, to the lab's collector
    phases: tuple[Phase, ...] = ()  # or monitoring changed at set times within each repetition
    duration: Optional[int] = None  # seconds per instance for this case's steps (a phased case's long run)
    capture: Optional[CaseCapture] = None  # a listener on the monitor ports: what it captured of what was offered
    collector_guest: Optional[str] = None  # a GRE/ERSPAN output's collector: what arrived there (its counters)
    perf_stat: Optional[PerfStatSpec] = None  # events counted on ovs-vswitchd: the case's perf_stat: or the suite's
    cpus: Optional[CpuPlacement] = None  # ovs-vswitchd's and the measurement's CPUs during the case (see .cpus)
    own_perf_stat: bool = dataclasses.field(default=False, compare=False, repr=False)  # perf_stat: set by the case

    def monitors(self) -> list[Monitor]:
        """Every monitoring the case uses (a collector of each kind is started for it)."""
        return [m for m in [self.monitor, *(p.monitor for p in self.phases)] if m is not None]


def parse_cases(ck: Checks, value: Any, bridges: set[str], guests: set[str]) -> list[Case]:
    if value is None:
        return [Case("default")]
    if not isinstance(value, list) or not value:
        ck.bad(("cases",), "must be a non-empty list of {name, description, policy}")
        return [Case("default")]
    out: list[Case] = []
    for i, raw in enumerate(value):
        path: yamldoc.PathKey = ("cases", i)
        if not isinstance(raw, dict):
            ck.bad(path, "each case is a mapping with name and optional policy")
            continue
        ck.unknown(raw, path, _CASE_KEYS)
        name = raw.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            ck.bad((*path, "name"), "required: 1-64 letters, digits, '_', '.', '-'")
            continue
        if any(c.name == name for c in out):
            ck.bad((*path, "name"), f"duplicate case name {name!r}")
        monitor, phases = _monitoring(ck, raw, path, bridges)
        policy = ck.policy(raw.get("policy"), (*path, "policy"))
        duration = None
        if "duration" in raw:
            duration = ck.integer(raw["duration"], (*path, "duration"), 1, MAX_DURATION_S, "duration (seconds)")
        capture = _capture(ck, raw["capture"], (*path, "capture"), guests) if "capture" in raw else None
        collector = _collector_guest(ck, raw, path, guests, policy)
        cpus = cpus_key.parse(raw["cpus"], ck.bad, (*path, "cpus")) if "cpus" in raw else None
        case = Case(name, str(raw.get("description", "")), policy, monitor, phases, duration, capture, collector,
                    cpus=cpus)  # fmt: skip
        out.append(_with_own_perf_stat(ck, raw, path, case))
    return out or [Case("default")]


def _with_own_perf_stat(ck: Checks, raw: dict[str, Any], path: yamldoc.PathKey, case: Case) -> Case:
    """A case's own ``perf_stat:`` (``false``: none for this case), kept apart until the suite's is known.

    Counting is per case because its cost is: perf attached to ovs-vswitchd's
    threads adds work of its own, so a study compares the cases it explains
    (the mirrored ones, say) while the baseline runs without perf."""
    if "perf_stat" not in raw:
        return case
    value = raw["perf_stat"]
    spec = None if value is False else parse_perf_stat(value, ck.bad, (*path, "perf_stat"))
    return dataclasses.replace(case, perf_stat=spec, own_perf_stat=True)


def _capture(ck: Checks, value: Any, path: yamldoc.PathKey, guests: set[str]) -> Optional[CaseCapture]:
    """``capture: {guests: [MON1, ...], snaplen: N, buffer_kib: N}``: a capture on each guest's VIF during every
    repetition, keeping N bytes per packet, with a kernel ring of N KiB (tcpdump -s and -B)."""
    if not isinstance(value, dict):
        ck.bad(path, "must be a mapping {guests: [GUEST, ...], snaplen: BYTES, buffer_kib: KIB}")
        return None
    ck.unknown(value, path, _CAPTURE_KEYS)
    raw = value.get("guests")
    names = raw if isinstance(raw, list) else [raw]
    known = ", ".join(sorted(guests)) or "(none)"
    snaplen = None
    if "snaplen" in value:
        snaplen = ck.integer(value["snaplen"], (*path, "snaplen"), *SNAPLEN_RANGE, "snaplen (bytes)")
    buffer_kib = None
    if "buffer_kib" in value:
        buffer_kib = ck.integer(value["buffer_kib"], (*path, "buffer_kib"), *BUFFER_KIB_RANGE, "buffer (KiB)")
    if not raw or not all(isinstance(g, str) and g in guests for g in names):
        ck.bad((*path, "guests"), f"a list of lab guests whose VIFs are captured, not {raw!r}; guests: {known}")
        return None
    if len(set(names)) != len(names):
        ck.bad((*path, "guests"), "a guest is listed twice")
    return CaseCapture(tuple(names), snaplen, buffer_kib)


def _collector_guest(
    ck: Checks, raw: dict[str, Any], path: yamldoc.PathKey, guests: set[str], policy: Optional[Policy]
) -> Optional[str]:
    """``collector_guest: GUEST``: the guest a GRE/ERSPAN mirror or TAP of the case sends its copies to,
    whose receive counters say what arrived; the case must have such an output."""
    if "collector_guest" not in raw:
        return None
    name = raw["collector_guest"]
    if not isinstance(name, str) or name not in guests:
        known = ", ".join(sorted(guests)) or "(none)"
        ck.bad((*path, "collector_guest"), f"a lab guest receiving the tunnel's packets, not {name!r}; guests: {known}")
        return None
    rules = [*(policy.mirrors if policy else []), *(policy.taps if policy else [])]
    if not any(r.output is not None and r.output.kind in ("gre", "erspan") for r in rules):
        ck.bad((*path, "collector_guest"), "the case's policy has no mirror or TAP with a gre or erspan output: "
               "nothing is sent to a collector")  # fmt: skip
        return None
    return name


def _monitoring(
    ck: Checks, raw: dict[str, Any], path: yamldoc.PathKey, bridges: set[str]
) -> tuple[Optional[Monitor], tuple[Phase, ...]]:
    """A case's ``monitor:`` or ``phases:`` (one or the other), and no sFlow/IPFIX of its own in ``policy:``."""
    if "monitor" in raw and "phases" in raw:
        ck.bad((*path, "phases"), "give monitor (for the whole case) or phases (changed during it), not both")
        return None, ()
    if "monitor" in raw or "phases" in raw:
        pol = raw.get("policy")
        for br, settings in (pol.get("bridges") or {}).items() if isinstance(pol, dict) else []:
            for kind in ("sflow", "ipfix"):
                if isinstance(settings, dict) and kind in settings:
                    ck.bad((*path, "policy", "bridges", br, kind), f"the case's monitor sets {kind}; not both")
    monitor = None
    if "monitor" in raw:
        _, monitor = parse_monitor(raw["monitor"], ck.bad, (*path, "monitor"), bridges)
    phases = parse_phases(raw["phases"], ck.bad, (*path, "phases"), bridges) if "phases" in raw else ()
    return monitor, phases


def check_phases(ck: Checks, cases: list[Case], tests: list[Test]) -> None:
    """Every phase must start within every test's run (a phase after the end would never be measured)."""
    for i, case in enumerate(cases):
        if not case.phases:
            continue
        last = case.phases[-1].at
        for t in tests:
            seconds = case.duration or t.duration
            if seconds <= last:
                ck.bad(("cases", i, "phases"), f"the last phase starts at {last} s; test {t.name} runs {seconds} s "
                       "(give the case a duration)")  # fmt: skip
            if t.confidence is not None:
                ck.bad(("cases", i, "phases"), f"test {t.name} iterates for confidence: phases need one run")


def with_perf_stat(ck: Checks, data: dict[str, Any], cases: list[Case]) -> list[Case]:
    """The suite's ``perf_stat:`` given to every case that does not set its own."""
    if "perf_stat" not in data:
        return cases
    spec = parse_perf_stat(data["perf_stat"], ck.bad, ("perf_stat",))
    return [c if c.own_perf_stat else dataclasses.replace(c, perf_stat=spec) for c in cases] if spec else cases
