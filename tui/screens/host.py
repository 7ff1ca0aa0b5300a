"""Host screen: the switch (OVS version, datapaths, bridges and their sFlow/IPFIX), CPU, memory, agent, audit.

Sampled about once a second in a worker (psutil deltas give the CPU
shares); the bridges part also follows OVSDB changes as they are pushed.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Static

from appliance.core import render
from tui.backend.host import HostSample, HostSampler, TapRow
from tui.widgets.banner import ConnectionBanner
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal

SAMPLE_INTERVAL_S = 1.0
BAR = 10


def bar(percent: float, width: int = BAR) -> str:
    filled = max(0, min(width, round(percent / 100 * width)))
    return "█" * filled + "░" * (width - filled)


def cpu_lines(cores: list[float] | None, per_line: int) -> list[str]:
    if cores is None:
        return ["measuring (CPU shares need two samples)..."]
    cells = [f"cpu{i:<2} {bar(p)} {p:5.1f}%" for i, p in enumerate(cores)]
    return ["   ".join(cells[i : i + per_line]) for i in range(0, len(cells), per_line)]


def audit_line(entry: dict) -> str:
    when = str(entry.get("time", "?")).replace("T", " ")[5:19]
    return f"{when} {entry.get('user', '?')}: {entry.get('command', '?')} → {entry.get('result', '?')}"


def tap_line(t: TapRow) -> str:
    """A flow TAP and what its flows copied ("-": the counts could not be read)."""
    copied = "-" if t.packets is None else f"{render.count(t.packets)} pkt, {render.si(t.bytes, 'B')}"
    return f"TAP {t.name}: {t.cols.describe()} · copied {copied}"


def render_sample(s: HostSample, width: int) -> dict[str, str]:
    inv = s.inventory
    h = inv.host
    system = " ".join(filter(None, [h.system_type, h.system_version])) or "-"
    switch = [
        f"host {h.hostname} ({system})",
        f"Open vSwitch {h.ovs_version or '?'}, schema {h.db_version or '?'}",
        f"database {h.db_target}",
        f"datapaths supported: {', '.join(h.datapath_types) or '-'}; in use: "
        f"{', '.join(h.bridge_datapath_types) or '-'}",
    ]
    bridges = []
    for b in inv.bridges:
        bridges.append(
            f"{b.name:<12} {b.datapath_type or 'system':<8} {b.ports:>4} ports  {len(b.mirrors)} mirror(s)  "
            f"fail-mode {b.fail_mode or 'standalone'}"
        )
        bridges += [f"  {line}" for line in b.sampling_text()]  # sFlow, IPFIX
        bridges += [f"  {tap_line(t)}" for t in s.taps if t.bridge == b.name]
    bridges = bridges or ["no bridges"]
    per_line = max(1, (width - 4) // 29)
    cpu = cpu_lines(s.cpu_per_core, per_line)
    if s.vswitchd_pid is None:
        cpu.append("ovs-vswitchd: not on this host (or its pid file is not readable)")
    elif s.vswitchd_cpu is None:
        cpu.append(f"ovs-vswitchd pid {s.vswitchd_pid}: gone")
    else:
        cpu.append(
            f"ovs-vswitchd pid {s.vswitchd_pid}: {s.vswitchd_cpu:.1f}% of one core, "
            f"RSS {render.si(s.vswitchd_rss, 'B')}"
        )
    mem = f"{render.si(s.mem_used, 'B')} used of {render.si(s.mem_total, 'B')} ({100 * s.mem_used / s.mem_total:.0f}%)"
    agent = ("● " if s.agent.running else "○ " if s.agent.running is False else "? ") + s.agent.text
    audit = [audit_line(e) for e in reversed(s.audit)] or ["no audit entries for this switch yet"]
    return {
        "switch": "\n".join(switch),
        "bridges": "\n".join(bridges),
        "cpu": "\n".join(cpu),
        "memory": mem,
        "agent": agent,
        "audit": "\n".join(audit),
    }


class Sampled(Message):
    def __init__(self, sample: HostSample | None, error: str | None) -> None:
        super().__init__()
        self.sample = sample
        self.error = error


class HostScreen(Screen[None]):
    CSS_PATH = "host.tcss"
    BINDINGS = [Binding("r", "refresh", "Refresh")]
    SECTIONS = ("switch", "bridges", "cpu", "memory", "agent", "audit")
    TITLES = {
        "switch": "Switch",
        "bridges": "Bridges",
        "cpu": "CPU",
        "memory": "Memory",
        "agent": "hvnet agent",
        "audit": "Last audit entries (newest first)",
    }

    def compose(self) -> ComposeResult:
        yield Header()
        yield ConnectionBanner()
        with VerticalScroll(id="host"):
            for key in self.SECTIONS:
                yield Static(self.TITLES[key], classes="heading")
                yield Literal("...", id=f"host-{key}", classes="section")
        yield Footer()

    def on_mount(self) -> None:
        self.sampler = HostSampler(self.app.backend, getattr(self.app, "host_name", None))  # type: ignore[attr-defined]
        self.set_interval(SAMPLE_INTERVAL_S, self.action_refresh)
        self.action_refresh()

    def db_changed(self) -> None:
        self.action_refresh()

    @work(thread=True, exclusive=True, group="host")
    def action_refresh(self) -> None:
        try:
            self.post_message(Sampled(self.sampler.sample(), None))
        except Exception as exc:  # shown in place; the next sample tries again
            self.post_message(Sampled(None, str(exc)))

    def on_sampled(self, message: Sampled) -> None:
        if message.sample is None:
            self.query_one("#host-switch", Static).update(f"✗ could not read the host: {message.error}")
            return
        for key, text in render_sample(message.sample, self.size.width).items():
            self.query_one(f"#host-{key}", Static).update(text)
