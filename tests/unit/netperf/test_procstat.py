"""A VM's CPU from its own /proc/stat: two real reads a second apart, and what is not known."""

from __future__ import annotations

from pathlib import Path

from appliance.netperf.parse import procstat

DATA = Path(__file__).resolve().parent.parent / "data"


def _reads() -> tuple[str, str]:
    lines = (DATA / "proc-stat-2cpu-two-reads.txt").read_text().splitlines()
    return "\n".join(lines[:3]), "\n".join(lines[3:6])


def test_two_reads_give_the_vms_busy_share() -> None:
    a, b = (procstat.parse(t) for t in _reads())
    assert a is not None and b is not None and a.vcpus == b.vcpus == 2
    got = procstat.usage(a, b, "VM vm1")
    assert got["vcpus"] == 2 and 0.0 <= got["busy_pct_of_vm"] <= 100.0
    assert got["busy_vcpus"] == round(got["busy_pct_of_vm"] * 2 / 100, 2)
    spent = b.total - a.total
    assert spent > 0 and abs(got["busy_pct_of_vm"] - 100 * (b.busy - a.busy) / spent) < 0.06


def test_what_cannot_be_read_is_not_measured_never_zero() -> None:
    a = procstat.parse(_reads()[0])
    assert procstat.usage(a, None, "VM x")["busy_pct_of_vm"] is None
    assert procstat.usage(a, a, "VM x")["why"].startswith("not measured")
    assert procstat.parse("cpu  a b c d") is None and procstat.parse("") is None and procstat.parse(None) is None
