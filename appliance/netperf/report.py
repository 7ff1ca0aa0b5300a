"""Text reports of a saved run, in the 2010 study's shape: metrics down, concurrency across.

Everything is recomputed from ``results.json``; nothing here measures.
Figures carry their units; a figure that was not measured prints ``-``,
never a configured value.  Policing steps add what was achieved against
what was configured (with the burst and the enforcing mechanism, or that it
was NOT enforced); mirror steps add the mirror delivery ratio; suites with
several cases add each case's change against the first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Optional

from .. import render

Row = tuple[str, Callable[[dict[str, Any]], str]]


def _fig(summary: dict[str, Any], key: str) -> Optional[float]:
    v = summary.get(key)
    return v.get("mean") if isinstance(v, dict) else None


def _fmt(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pm(summary: dict[str, Any], key: str, digits: int = 2) -> str:
    v = summary.get(key)
    if not isinstance(v, dict):
        return "-"
    ci = v.get("ci95")
    return _fmt(v["mean"], digits) + ("" if ci is None else f" ±{ci:,.{digits}f}")


SWEEP = "sweep"  # group key of a message-size sweep at one concurrency: sizes become the columns


def groups(doc: dict[str, Any]) -> OrderedDict[tuple[str, str, Any], list[dict[str, Any]]]:
    """Steps grouped into tables, in run order: one per (test, case, message size), columns = concurrency;
    a test that sweeps message sizes at one concurrency gets one table per case, columns = sizes."""
    shape: dict[tuple[str, str], tuple[set[Any], set[int]]] = {}
    for step in doc["steps"]:
        sizes, conc = shape.setdefault((step["test"], step["case"]), (set(), set()))
        sizes.add(step.get("message_size"))
        conc.add(step["concurrency"])
    out: OrderedDict[tuple[str, str, Any], list[dict[str, Any]]] = OrderedDict()
    for step in doc["steps"]:
        sizes, conc = shape[(step["test"], step["case"])]
        size = SWEEP if len(conc) == 1 and len(sizes) > 1 else step.get("message_size")
        out.setdefault((step["test"], step["case"], size), []).append(step)
    return out


def achieved_ratio(step: dict[str, Any]) -> Optional[float]:
    """Received Mbit/s over the policed rate (streams only): 1.0 = the limit was reached exactly."""
    pol = step.get("policing")
    if not pol or step["type"] not in ("TCP_STREAM", "UDP_STREAM"):
        return None
    s = step.get("summary", {})
    got = _fig(s, "received_mbps") if step["type"] == "UDP_STREAM" else _fig(s, "sum")
    return None if got is None else got * 1000.0 / pol["rate_kbps"]


def delivery_ratio(step: dict[str, Any]) -> Optional[tuple[float, float]]:
    """Mirror copies sent ÷ packets on the selected ports, (mean, min) over the step's mirrors and repetitions."""
    ratios = []
    for rep in step.get("repetitions", []):
        counters = rep.get("counters", {})
        for m in step.get("mirrors", []):
            out = counters.get(m.get("output_port") or "", {}).get("tx_packets")
            selected = sum(counters.get(p, {}).get("rx_packets", 0) for p in m.get("src", [])) + sum(
                counters.get(p, {}).get("tx_packets", 0) for p in m.get("dst", [])
            )
            if out is not None and selected:
                ratios.append(out / selected)
    if not ratios:
        return None
    return sum(ratios) / len(ratios), min(ratios)


def _rows(step_type: str) -> list[Row]:
    rr = step_type in ("TCP_RR", "TCP_CRR", "UDP_RR")
    unit = "trans/s" if rr else "Mbit/s"
    name = "transaction rate" if rr else "throughput"
    rows: list[Row] = [
        (f"avg {name} ({unit})", lambda st: _pm(st["summary"], "mean")),
        (f"total {name} ({unit})", lambda st: _pm(st["summary"], "sum")),
        (
            f"min/max per instance ({unit})",
            lambda st: f"{_fmt(_fig(st['summary'], 'min'), 1)}/{_fmt(_fig(st['summary'], 'max'), 1)}",
        ),
        ("fairness (Jain, 1 = even)", lambda st: _fmt(_fig(st["summary"], "jain"), 3)),
        ("lost (of started)", lambda st: f"{st['summary'].get('lost', 0)}/{st['summary'].get('instances', 0)}"),
    ]
    if step_type.startswith("TCP"):
        rows.append(("TCP retransmissions", lambda st: _fmt(_fig(st["summary"], "retransmissions"), 0)))
    if step_type == "UDP_STREAM":
        rows += [
            ("UDP sent (Mbit/s)", lambda st: _pm(st["summary"], "sent_mbps")),
            ("UDP received (Mbit/s)", lambda st: _pm(st["summary"], "received_mbps")),
            ("UDP loss (%)", lambda st: _fmt(_fig(st["summary"], "udp_loss_pct"), 1)),
        ]
    if rr:
        rows += [
            ("latency mean (µs)", lambda st: _fmt(_fig(st["summary"], "latency_mean_us"), 1)),
            (
                "latency p50/p90/p99 (µs)",
                lambda st: "/".join(_fmt(_fig(st["summary"], f"latency_{p}_us"), 0) for p in ("p50", "p90", "p99")),
            ),
        ]
    rows += [
        (
            "host CPU (%) / busiest core (%)",
            lambda st: (
                f"{_fmt(st['summary'].get('cpu_host_pct'), 0)}/{_fmt(st['summary'].get('cpu_busiest_core_pct'), 0)}"
            ),
        ),
        ("ovs-vswitchd (% of a core)", lambda st: _fmt(st["summary"].get("cpu_vswitchd_pct_of_core"), 0)),
        (
            "netperf/netserver (% of a core)",
            lambda st: (
                f"{_fmt(st['summary'].get('cpu_netperf_pct_of_core'), 0)}/"
                f"{_fmt(st['summary'].get('cpu_netserver_pct_of_core'), 0)}"
            ),
        ),
        ("start spread (ms)", lambda st: _fmt(st["summary"].get("start_spread_ms_max"), 1)),
        ("switch drops, all ports (pkts, total)", _drops),
    ]
    return rows


def _drops(step: dict[str, Any]) -> str:
    total = 0
    seen = False
    for rep in step.get("repetitions", []):
        for c in rep.get("counters", {}).values():
            for k in ("rx_dropped", "tx_dropped"):
                if c.get(k) is not None:
                    seen = True
                    total += c[k]
    return f"{total:,}" if seen else "-"


def _meter_drops(step: dict[str, Any]) -> str:
    drops = [r["meter_drops"] for r in step.get("repetitions", []) if r.get("meter_drops") is not None]
    return f"{sum(drops):,}" if drops else "-"


def header(doc: dict[str, Any]) -> str:
    m = doc["meta"]
    srv = m["server"]
    managed = "netserver started by hvnet" if srv.get("managed") else "netserver not managed by hvnet"
    lines = [
        f"suite {m['suite']['name']}: {doc['state']}"
        + (f" ({doc.get('partial_reason')})" if doc.get("partial") and doc.get("partial_reason") else ""),
        f"  started {m.get('started')}, finished {m.get('finished') or '-'}",
        f"  hvnet {m['hvnet_version']}, OVS {m.get('ovs_version') or '?'} ({', '.join(m.get('datapath_types', []))}), "
        f"netperf {m.get('netperf_version') or '?'}, kernel {m['kernel']}, host {m['host']}",
        f"  client {m['client']['guest']} ({m['client']['address']}) -> server {srv.get('guest') or ''} "
        f"{srv['address']}:{srv['port']} ({managed})",
    ]
    in_vm = [f"{side} {m[side]['guest']}" for side in ("client", "server") if m[side].get("runs_in") == "qemu"]
    if in_vm:
        # A TCG guest's figures measure the emulator as much as the switch: say so next to them.
        lines.append(
            f"  note: {' and '.join(in_vm)} run{'s' if len(in_vm) == 1 else ''} in a QEMU guest: rates include the "
            "VM's own cost (emulated under TCG unless KVM); netperf CPU is the guest's own accounting, "
            "netserver CPU in a guest is not sampled"
        )
    for w in m.get("warnings", []):
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def text(doc: dict[str, Any]) -> str:
    """The whole report: header, then one table per (test, case, message size)."""
    out = [header(doc)]
    by_group = groups(doc)
    first_case = doc["steps"][0]["case"] if doc["steps"] else None
    for (test, case, size), steps in by_group.items():
        steps = [s for s in steps if s.get("summary")]
        if not steps:
            continue
        s0 = steps[0]
        if size == SWEEP:
            what = f"concurrency {s0['concurrency']}"
        elif size:
            what = f"-m {size}"
        else:
            what = f"-r {s0['request_size']},{s0['response_size']}" if s0.get("request_size") else "default size"
        reps = max(s["summary"]["repetitions"] for s in steps)
        out.append("")
        out.append(f"{test}: {s0['type']} {what}, {s0['duration']} s, {reps} repetition(s), case {case}")
        rows = _rows(s0["type"])
        extra = _extra_rows(steps, by_group, first_case, test, case, size)
        if size == SWEEP:
            headers = ["message size (bytes)", *[str(s["message_size"]) for s in steps]]
        else:
            headers = ["concurrent instances", *[str(s["concurrency"]) for s in steps]]
        table_rows = [[label, *[fn(s) for s in steps]] for label, fn in rows + extra]
        out.append(render.table(headers, table_rows))
        for s in steps:
            at = f"-m {s['message_size']}" if size == SWEEP else str(s["concurrency"])
            reasons = s["summary"].get("lost_reasons") or {}
            for reason, n in reasons.items():
                out.append(f"  lost at {at}: {n} x {reason}")
            for rep in s.get("repetitions", []):
                for note in rep.get("notes", []):
                    out.append(f"  note at {at} (rep {rep['repetition']}): {note}")
    if not doc["steps"]:
        out.append("\nno step was measured")
    return "\n".join(out)


def _extra_rows(
    steps: list[dict[str, Any]], by_group: Any, first_case: Optional[str], test: str, case: str, size: Any
) -> list[Row]:
    rows: list[Row] = []
    if any(s.get("policing") for s in steps):

        def policed(st: dict[str, Any]) -> str:
            p = st.get("policing")
            if not p:
                return "-"
            enforced = {True: "", False: " NOT ENFORCED", None: " unverified"}[p.get("verified")]
            return f"{p['rate_kbps']}/{p['burst_kbit']} {p['mechanism']}{enforced}"

        rows.append(("policing kbit/s / burst kbit", policed))
        rows.append(("achieved ÷ configured", lambda st: _fmt(achieved_ratio(st), 2)))
        rows.append(("policer drops (pkts, total)", _meter_drops))
    if any(s.get("mirrors") for s in steps):

        def mirrors(st: dict[str, Any]) -> str:
            r = delivery_ratio(st)
            return "-" if r is None else f"{r[0]:.3f} (min {r[1]:.3f})"

        rows.append(("mirrors on the client VIF", lambda st: str(len(st.get("mirrors", [])))))
        rows.append(("mirror delivery (copies ÷ pkts)", mirrors))
    policed_differently = any(s.get("policing") for s in steps)  # a rate sweep: "vs first case" says nothing
    if (
        first_case is not None
        and case != first_case
        and (test, first_case, size) in by_group
        and not policed_differently
    ):
        base = {
            (s.get("message_size"), s["concurrency"]): s for s in by_group[(test, first_case, size)] if s.get("summary")
        }

        def change(key: str) -> Callable[[dict[str, Any]], str]:
            def fn(st: dict[str, Any]) -> str:
                b = base.get((st.get("message_size"), st["concurrency"]))
                a0 = _fig(b["summary"], key) if b else None
                a1 = _fig(st["summary"], key)
                return "-" if not a0 or a1 is None else f"{100.0 * (a1 - a0) / a0:+.1f}%"

            return fn

        rows.append((f"total vs case {first_case}", change("sum")))
        if steps[0]["type"] in ("TCP_RR", "TCP_CRR", "UDP_RR"):
            rows.append((f"latency mean vs case {first_case}", change("latency_mean_us")))
    return rows
