"""netperf regression suites: suites as data, a runner, statistics, reports and comparisons.

Public API (what the CLI and the TUI use)::

    s = suite.load("quick")                       # validated whole, file:line: field errors
    runner = Runner(s, host=host, guests=lab, conn=conn, out_dir=path, on_event=callback)
    doc = runner.run()                             # results.json + results.csv + raw outputs in path
    print(report.text(results.load(path)))         # the study's table shape, regenerated from the file
    cmp = compare.compare(results.load(a), results.load(b), threshold_pct=5)
"""

from __future__ import annotations

from . import aggregate, compare, omni, report, results, stats, suite
from .runner import Event, Runner

__all__ = ["Event", "Runner", "aggregate", "compare", "omni", "report", "results", "stats", "suite"]
