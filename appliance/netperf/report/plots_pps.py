"""The packet-rate figure of a UDP_PPS test: received and monitor packets/s per case, with 95% error bars.

The x axis is the frame size when the test sweeps sizes, else the offered
rate (packets/s); one solid line per case for what the receiver got, one
dashed line per case that copies for what its monitor port was sent.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Optional

from appliance.netperf.store.records import Figure, StepResult, Summary


def _x(step: StepResult, by_frame: bool) -> Optional[float]:
    if by_frame:
        return float(step.frame_size or 0)
    o = step.offered
    return float(o["pps"]) if isinstance(o, dict) and o.get("pps") is not None else None


def figure(suite: str, test: str, steps: list[StepResult], plt: Any, label: Callable[[object], str]) -> Any:
    """One figure for the test's steps (every step of the test, every case); ``label`` makes run-file text
    safe for matplotlib (see :func:`.plots.label`)."""
    by_frame = len({s.frame_size for s in steps}) > 1 or all(not s.offered for s in steps)
    cases: OrderedDict[str, list[StepResult]] = OrderedDict()
    for s in steps:
        cases.setdefault(s.case, []).append(s)
    fig, ax = plt.subplots(1, 1, figsize=(8, 5))
    for case, ss in cases.items():
        lines = (("received_pps", "-", "received"), ("monitor_pps", "--", "monitor"),
                 ("mirrored_pps", "-.", "mirrored"), ("arrived_pps", ":", "arrived"))  # fmt: skip
        for key, style, what in lines:
            pts = []
            for s in ss:
                v = (s.summary or Summary()).figure(key)
                x = _x(s, by_frame)
                if isinstance(v, Figure) and v.mean is not None and x is not None:
                    pts.append((x, v.mean, v.ci95 or 0.0))
            if pts:
                pts.sort()
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o",
                            linestyle=style, capsize=3, label=label(f"{case}: {what}"))  # fmt: skip
    ax.set_title(label(f"{suite} / {test} ({steps[0].type}, {steps[0].duration} s)"))
    ax.set_xlabel("frame size on the wire (bytes)" if by_frame else "offered (packets/s)")
    ax.set_ylabel("packets/s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
