"""sFlow/IPFIX in a suite: a case's ``monitor:`` and ``phases:``, and the arithmetic of what a collector got.

A case says what to sample and how; the collector that receives it is
the lab's (started by the runner for the case, see :mod:`.monitoring`),
so a suite never names a target::

    cases:
      - name: sflow-64
        monitor: {kind: sflow, sampling: 64, polling: 30, header: 128}
      - name: ipfix-nocache-64
        monitor: {kind: ipfix, sampling: 64, cache_active_timeout: 0, cache_max_flows: 0}
      - name: sweep                     # one long run, the setting changed at set times
        phases:
          - {at: 0, monitor: off}
          - {at: 100, monitor: {kind: sflow, sampling: 1024}}

``bridge`` defaults to the bridge of the client's guest.  The values are
checked by the same grammar as a policy file's (:mod:`appliance.switch.sampling`).

Received ÷ expected: OVS draws each packet's fate independently (1 in N),
so the samples of P packets are binomial(P, 1/N); the interval given is
Wilson's 95% interval of that proportion, scaled by N, so a ratio whose
interval excludes 1 is more than chance: a collector or a socket that
drops, or sampling that is not 1-in-N.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from appliance.netperf.figures import stats
from appliance.policy import Policy
from appliance.policy.plan.model import REMOVE, SamplingRule
from appliance.switch import sampling

MONITOR_KEYS = {
    "sflow": ("kind", "bridge", *sampling.SFLOW_KEYS[1:]),
    "ipfix": ("kind", "bridge", *sampling.IPFIX_KEYS[1:]),
}
PHASE_KEYS = {"at", "monitor"}
OFF_WORDS = ("off", "none")
Z95 = 1.959964


@dataclass(frozen=True)
class Monitor:
    """What a case samples: sFlow or IPFIX on one bridge (None: the client's), settings as a policy gives them."""

    kind: str
    bridge: Optional[str] = None
    settings: tuple[tuple[str, Any], ...] = ()

    def get(self, key: str) -> Any:
        return dict(self.settings).get(key)

    @property
    def sampling(self) -> int:
        """1 in N (OVS's default, 400, when the case does not say)."""
        return int(self.get("sampling") or 400)

    @property
    def cached(self) -> bool:
        """IPFIX with a flow cache (OVS exports a flow per active timeout); False: every sample at once."""
        return self.kind == "ipfix" and 0 not in (self.get("cache_active_timeout"), self.get("cache_max_flows"))

    @property
    def variant(self) -> str:
        """The study's series: sFlow, IPFIX with its cache, IPFIX without."""
        if self.kind == "sflow":
            return "sFlow"
        return "IPFIX" if self.cached else "IPFIX no cache"

    def cols(self, bridge: str, target: str) -> sampling.SamplingCols:
        return sampling.from_fields(self.kind, {"targets": [target], **dict(self.settings)})

    def describe(self) -> str:
        return self.cols(self.bridge or "-", "collector:1").describe().replace(" to collector:1", "")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "bridge": self.bridge, **dict(self.settings), "variant": self.variant}


SETTLE_S = 1.6  # pmacct writes what it received every second: wait this long for the last of it
IPFIX_SETTLE_MAX_S = 10.0


def settle_seconds(monitors: list[Monitor]) -> float:
    """How long after traffic stops a repetition waits for the last samples to reach the collector's file:
    an IPFIX cache holds a flow up to its active timeout (OVS's default 60 s; at most 10 s are waited)."""
    if not monitors:
        return 0.0
    waits = [SETTLE_S]
    for m in monitors:
        if m.kind == "ipfix" and m.cached:
            timeout = m.get("cache_active_timeout")
            waits.append(SETTLE_S + min(IPFIX_SETTLE_MAX_S, 60 if timeout is None else timeout))
    return max(waits)


@dataclass(frozen=True)
class Phase:
    """From ``at`` seconds into each repetition, this monitoring (None: none)."""

    at: int
    monitor: Optional[Monitor]

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "monitor": self.monitor.to_json() if self.monitor else None}


# -- reading a case ---------------------------------------------------------------------------------


def parse_monitor(value: Any, bad: Any, path: tuple[Any, ...], bridges: set[str]) -> tuple[bool, Optional[Monitor]]:
    """``monitor:`` -> (valid, Monitor or None for off); problems go to ``bad(path, message)``."""
    if value is None or (isinstance(value, str) and value.lower() in OFF_WORDS) or value is False:
        return True, None
    if not isinstance(value, dict):
        bad(path, "must be 'off' or {kind: sflow|ipfix, sampling: N, ...} (the lab's collector receives it)")
        return False, None
    kind = value.get("kind")
    if kind not in sampling.KINDS:
        bad((*path, "kind"), f"must be one of: {', '.join(sampling.KINDS)}, not {kind!r}")
        return False, None
    ok = True
    for key in value:
        if key == "targets":
            bad((*path, key), "a suite's monitoring goes to the lab's collector: leave targets out")
            ok = False
        elif key not in MONITOR_KEYS[kind]:
            bad((*path, key), f"unknown key; allowed: {', '.join(MONITOR_KEYS[kind])}")
            ok = False
    bridge = value.get("bridge")
    if bridge is not None and bridge not in bridges:
        bad((*path, "bridge"), f"no bridge {bridge!r} in the topology; bridges: {', '.join(sorted(bridges))}")
        ok = False
    settings = {k: v for k, v in value.items() if k not in ("kind", "bridge", "targets") and k in MONITOR_KEYS[kind]}
    try:
        sampling.from_fields(kind, {"targets": ["192.0.2.1:6343"], **settings})
    except sampling.SamplingFieldError as exc:
        for field, message in exc.problems:
            bad((*path, field), message)
        ok = False
    if not ok:
        return False, None
    return True, Monitor(kind, bridge, tuple(settings.items()))


def parse_phases(value: Any, bad: Any, path: tuple[Any, ...], bridges: set[str]) -> tuple[Phase, ...]:
    """``phases:`` -> phases in time order; the first at 0, each later than the one before."""
    if not isinstance(value, list) or not value:
        bad(path, "must be a list of {at: SECONDS, monitor: off | {kind, sampling, ...}}")
        return ()
    out: list[Phase] = []
    for i, raw in enumerate(value):
        p = (*path, i)
        if not isinstance(raw, dict):
            bad(p, "each phase is {at: SECONDS, monitor: ...}")
            continue
        for key in raw:
            if key not in PHASE_KEYS:
                bad((*p, key), f"unknown key; allowed: {', '.join(sorted(PHASE_KEYS))}")
        at = raw.get("at")
        if isinstance(at, bool) or not isinstance(at, int) or at < 0:
            bad((*p, "at"), f"must be whole seconds >= 0 into the run, not {at!r}")
            continue
        if not out and at != 0:
            bad((*p, "at"), "the first phase starts at 0 (what the run starts with)")
        if out and at <= out[-1].at:
            bad((*p, "at"), f"must be later than the phase before ({out[-1].at} s)")
        ok, monitor = parse_monitor(raw.get("monitor"), bad, (*p, "monitor"), bridges)
        if ok:
            out.append(Phase(at, monitor))
    return tuple(out)


# -- policy fragments ---------------------------------------------------------------------------------


def policy(kind_bridge: tuple[str, str], monitor: Optional[Monitor], target: Optional[str]) -> Policy:
    """The fragment that makes ``bridge``'s sFlow or IPFIX this monitor (None: takes it away)."""
    kind, bridge = kind_bridge
    value: Any = REMOVE if monitor is None or target is None else monitor.cols(bridge, target)
    return Policy(source="(suite monitoring)", sampling=[SamplingRule(bridge, kind, value, ())], bridges={bridge: ()})


# -- what the collector received ------------------------------------------------------------------------


def wilson(successes: float, trials: float, z: float = Z95) -> Optional[tuple[float, float]]:
    """Wilson's interval of a binomial proportion (None without trials)."""
    if trials <= 0:
        return None
    p = min(1.0, max(0.0, successes / trials))
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def sampled_packets(kind: str, counters: dict[str, dict[str, int]]) -> Optional[int]:
    """Packets the switch could have sampled, from its port counters (None: none read).

    The packets the switch forwarded are the sum of ``tx_packets`` over the bridge's ports (a unicast
    packet leaves once).  Not ``rx_packets``: with the userspace datapath on veths those are the
    kernel's count of what reached the port, and the lab was measured losing a fifth of a TCP stream's
    segments before ovs-vswitchd read them (no drop counter says so; the samples match the forwarded
    count).  sFlow samples each packet once, at ingress; OVS's bridge IPFIX at ingress and at egress
    (twice), as the lab's collector test shows.
    """
    if not counters:
        return None
    forwarded = sum(int(c.get("tx_packets", 0)) for c in counters.values())
    return forwarded if kind == "sflow" else 2 * forwarded


def samples_from(kind: str, rate: int, packets: int) -> int:
    """Samples a collector received from the packets it accounted: sFlow's are one packet each; OVS's IPFIX
    scales each sample's packet count by the sampling rate (UINT32_MAX / probability), so divide it back."""
    return packets if kind == "sflow" else round(packets / rate)


def reception(
    kind: str, rate: int, received: int, counters: dict[str, dict[str, int]], seconds: float, **extra: Any
) -> dict[str, Any]:
    """A repetition's (or a phase's) collector figures: rates, expected, received ÷ expected with its 95% interval."""
    packets = sampled_packets(kind, counters)
    out: dict[str, Any] = {"kind": kind, "sampling": rate, "received": received, "seconds": round(seconds, 3)}
    if counters:
        rx = sum(int(c.get("rx_packets", 0)) for c in counters.values())
        out["ports_rx_packets"] = rx
        out["ports_tx_packets"] = sum(int(c.get("tx_packets", 0)) for c in counters.values())
    out["received_per_s"] = round(received / seconds, 1) if seconds > 0 else None
    out.update(extra)
    if packets is None:
        out.update(sampled_packets=None, expected=None, ratio=None, ratio_ci95=None)
        return out
    expected = packets / rate
    out["sampled_packets"] = packets  # what the expectation counts (see sampled_packets)
    out["expected"] = round(expected, 1)
    out["ratio"] = round(received / expected, 4) if expected else None
    interval = wilson(received, packets)
    out["ratio_ci95"] = None if interval is None or not expected else [round(x * rate, 4) for x in interval]
    return out


# -- across a step's repetitions --------------------------------------------------------------------------


def _ci(xs: list[float]) -> Optional[dict[str, Any]]:
    interval = stats.ci(xs)
    if interval is None:
        return None
    hw = interval.half_width
    return {"mean": round(interval.mean, 3), "ci95": None if hw is None else round(hw, 3), "n": interval.n}


def thread_summary(reps: list[Any]) -> Optional[dict[str, Any]]:
    """ovs-vswitchd's CPU per thread group across repetitions: {group: {mean, ci95, n}} (% of a core)."""
    groups = sorted({g for r in reps for g in (r.cpu.get("vswitchd_threads_pct") or {})})
    if not groups:
        return None
    out = {}
    for g in groups:
        xs = [r.cpu["vswitchd_threads_pct"].get(g, 0.0) for r in reps if r.cpu.get("vswitchd_threads_pct")]
        out[g] = _ci(xs)
    return out


def combine(records: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """Several repetitions' (or phases') collector records as one: rates as mean ± 95% CI, received ÷ expected
    from the summed counts with Wilson's interval, socket drops summed."""
    records = [r for r in records if r]
    if not records:
        return None
    rate = records[0]["sampling"]
    received = sum(r["received"] for r in records)
    sampled = [r.get("sampled_packets") for r in records]
    out: dict[str, Any] = {
        "kind": records[0]["kind"],
        "sampling": rate,
        "received": received,
        "received_per_s": _ci([r["received_per_s"] for r in records if r.get("received_per_s") is not None]),
        "accounted_bytes_per_s": _ci(
            [r["accounted_bytes_per_s"] for r in records if r.get("accounted_bytes_per_s") is not None]
        ),
    }
    drops = [r.get("socket_drops") for r in records]
    out["socket_drops"] = None if any(d is None for d in drops) else sum(drops)  # type: ignore[misc]
    if any(s is None for s in sampled):
        out.update(expected=None, ratio=None, ratio_ci95=None)
        return out
    packets = sum(sampled)  # type: ignore[arg-type]
    expected = packets / rate
    out["expected"] = round(expected, 1)
    out["ratio"] = round(received / expected, 4) if expected else None
    interval = wilson(received, packets)
    out["ratio_ci95"] = None if interval is None or not expected else [round(x * rate, 4) for x in interval]
    return out


def ratio_verdict(c: Optional[dict[str, Any]]) -> str:
    """Received ÷ expected in words: within chance of 1, or what it says (a drop, or more than expected)."""
    if not c or c.get("ratio") is None or not c.get("ratio_ci95"):
        return "not measured (no port counters)"
    lo, hi = c["ratio_ci95"]
    if lo <= 1.0 <= hi:
        return "as expected"
    if hi < 1.0:
        drops = c.get("socket_drops")
        why = f"{drops} datagram(s) dropped at the collector's socket" if drops else "lost before the collector"
        return f"FEWER than expected: {why}"
    return "MORE than expected"
