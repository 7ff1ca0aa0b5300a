"""netperf regression suites: suites as data, a runner, statistics, reports and comparisons.

Public API (what the CLI and the TUI use)::

    s = suite.load("quick")                       # validated whole, file:line: field errors
    runner = Runner(s, host=host, guests=lab, conn=conn, out_dir=path, on_event=callback)
    doc = runner.run()                             # results.json + results.csv + raw outputs in path
    print(report.text(results.load(path)))         # the study's table shape, regenerated from the file
    cmp = compare.compare(results.load(a), results.load(b), threshold_pct=5)
"""

from __future__ import annotations

# Submodules are imported where used (``from appliance.netperf import suite``):
# loading the package loads nothing else, so listing suites or validating one
# does not pay for the runner.
