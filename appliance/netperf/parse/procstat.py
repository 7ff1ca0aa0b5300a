"""A VM's CPU from its own ``/proc/stat``, read through its access before and after a repetition.

A process inside a real VM is not a process of this machine (nor of the
hypervisor hvnet drives): its rusage never reaches hvnet.  What the VM's
kernel counts does -- the first ``cpu`` line of ``/proc/stat`` sums every
vCPU's jiffies by state -- so a repetition's VM CPU is the busy share of the
jiffies that passed between two reads: all of the VM's work in that time
(netperf, netserver, the kernel's network stack, softirqs), not netperf's
alone, which the report says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

IDLE_FIELDS = (3, 4)  # idle, iowait (after user, nice, system)


@dataclass(frozen=True)
class CpuTotals:
    busy: int  # jiffies in every state but idle and iowait
    total: int  # user..steal (guest time is already in user)
    vcpus: int


def parse(text: Optional[str]) -> Optional[CpuTotals]:
    """The summed ``cpu`` line and the number of ``cpuN`` lines (None: not /proc/stat)."""
    if not text:
        return None
    total_line = None
    vcpus = 0
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "cpu":
            total_line = words[1:]
        elif words[0].startswith("cpu") and words[0][3:].isdigit():
            vcpus += 1
    if total_line is None or len(total_line) < 4 or not all(w.isdigit() for w in total_line):
        return None
    jiffies = [int(w) for w in total_line[:8]]  # user nice system idle iowait irq softirq steal
    idle = sum(jiffies[i] for i in IDLE_FIELDS if i < len(jiffies))
    total = sum(jiffies)
    return CpuTotals(total - idle, total, max(vcpus, 1))


def usage(before: Optional[CpuTotals], after: Optional[CpuTotals], label: str) -> dict[str, Any]:
    """The VM's busy share between two reads, or why it is not known."""
    if before is None or after is None:
        return {"vm": label, "busy_pct_of_vm": None, "why": "not measured: /proc/stat not read in the VM"}
    spent = after.total - before.total
    if spent <= 0 or after.busy < before.busy:
        return {"vm": label, "busy_pct_of_vm": None, "why": "not measured: the VM's counters did not advance"}
    pct = 100.0 * (after.busy - before.busy) / spent
    return {"vm": label, "vcpus": after.vcpus, "busy_pct_of_vm": round(pct, 1),
            "busy_vcpus": round(pct * after.vcpus / 100.0, 2)}  # fmt: skip
