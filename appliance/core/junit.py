"""JUnit XML, the report CI systems read (Jenkins, GitLab): one test suite of test cases.

The common schema: ``<testsuites>`` holding one ``<testsuite>`` with its
``tests``/``failures``/``errors``/``skipped`` counts and ``time``, holding
``<testcase name classname>`` elements, each passed (empty), or with one
``<failure>``, ``<error>`` or ``<skipped>`` child carrying a ``message``.

What a case did not measure is never a pass: the callers make it
``skipped`` (not decided) or ``error`` (could not run).  Escaping is
xml.etree's; what it cannot do is carry the characters XML 1.0 forbids
(control characters a VM's name may hold), so those are shown as escapes
(``\\x07``) before they reach it: the name stays visibly odd, the file valid.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

PASSED, FAILURE, ERROR, SKIPPED = "passed", "failure", "error", "skipped"

# Everything XML 1.0 cannot carry: C0 controls but tab, LF and CR; surrogates; U+FFFE and U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` with what XML 1.0 cannot carry shown as an escape (``\\x07``, ``\\ud800``)."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One test case: ``outcome`` one of passed, failure, error, skipped; ``message`` says why."""

    name: str
    classname: str
    outcome: str = PASSED
    message: str = ""
    detail: str = ""  # the failure's or error's text (evidence)
    time_s: Optional[float] = None  # None: not measured per case (the attribute is left out)


def document(
    suite: str,
    cases: list[Case],
    *,
    time_s: float,
    timestamp: Optional[datetime] = None,
    system_out: str = "",
) -> str:
    """The JUnit XML of one suite of ``cases`` (UTF-8, with its XML declaration)."""
    counts = {k: sum(c.outcome == k for c in cases) for k in (FAILURE, ERROR, SKIPPED)}
    totals = {
        "tests": str(len(cases)),
        "failures": str(counts[FAILURE]),
        "errors": str(counts[ERROR]),
        "skipped": str(counts[SKIPPED]),
        "time": f"{time_s:.3f}",
    }
    root = ET.Element("testsuites", {"name": xml_text(suite), **totals})
    ts = ET.SubElement(root, "testsuite", {"name": xml_text(suite), **totals})
    if timestamp is not None:
        ts.set("timestamp", timestamp.replace(microsecond=0).isoformat())
    for c in cases:
        if c.outcome not in (PASSED, FAILURE, ERROR, SKIPPED):
            raise ValueError(f"unknown test case outcome {c.outcome!r}")
        tc = ET.SubElement(ts, "testcase", {"name": xml_text(c.name), "classname": xml_text(c.classname)})
        if c.time_s is not None:
            tc.set("time", f"{c.time_s:.3f}")
        if c.outcome != PASSED:
            child = ET.SubElement(tc, c.outcome, {"message": xml_text(c.message)})
            if c.outcome != SKIPPED:
                child.set("type", c.outcome)
                child.text = xml_text(c.detail or c.message)
    if system_out:
        ET.SubElement(ts, "system-out").text = xml_text(system_out)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
