"""``hvnet suite``: run netperf suites, report, compare, list.

Thin: argument handling and terminal progress; the work is
:mod:`appliance.services.suites`'s.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from appliance.cli import suite_runs as cli_suite_runs
from appliance.core import documents, render
from appliance.core.errors import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from appliance.services.suites import Event

# netperf-suites/studies/*.yaml, named here so that building the parser reads no file (a test keeps them in step)
STUDIES = ("seed-2010", "vtap-dissertation-2024", "vtap-onos-thesis", "capture-2015", "cloudnet-2018")


class Progress:
    """One status line redrawn in place on a terminal; plain lines otherwise (logs, CI)."""

    def __init__(self, stream: Any = sys.stderr, quiet: bool = False) -> None:
        self.stream = getattr(stream, "exact", stream)  # it redraws with \r and escapes its own text
        self.tty = stream.isatty()
        self.quiet = quiet
        self.step = 0
        self.last = ""

    def __call__(self, e: Event) -> None:
        if self.quiet and e.kind not in ("warning",):
            return
        if e.kind == "step" and e.step is not None:
            self.step = e.step.index + 1
        if e.kind in ("warning", "info", "done") or not self.tty:
            self._clear()
            prefix = "warning: " if e.kind == "warning" else ""
            print(render.terminal(f"{prefix}{e.message}"), file=self.stream, flush=True)
            return
        self.last = e.message if e.kind == "repetition" else self.last
        self._draw(e)

    def _draw(self, e: Event) -> None:
        width = shutil.get_terminal_size((80, 24)).columns
        done = self.step - (0 if e.kind == "repetition" else 1)
        frac = max(0.0, min(1.0, done / e.steps_total)) if e.steps_total else 0.0
        bar = "#" * int(20 * frac) + "." * (20 - int(20 * frac))
        eta = "-" if e.eta_s is None else time.strftime("%H:%M:%S", time.gmtime(e.eta_s))
        line = render.terminal(f"[{bar}] step {self.step}/{e.steps_total} ETA {eta} | {self.last or e.message}")
        self.stream.write("\r" + line[: width - 1].ljust(width - 1))
        self.stream.flush()

    def _clear(self) -> None:
        if self.tty:
            width = shutil.get_terminal_size((80, 24)).columns
            self.stream.write("\r" + " " * (width - 1) + "\r")


def _override(field: str, label: Optional[str] = None) -> Any:
    """The argument type of an override: the service's parser, loaded when the option is given (building
    the parser loads no netperf code)."""

    def parse(text: str) -> Any:
        from appliance.services import suites

        try:
            return suites.parse_override(field, text, label)
        except suites.OverrideError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def cmd_run(args: argparse.Namespace) -> int:
    from appliance.frontdoor.guests import suite_measurement
    from appliance.services import suites

    s = suites.load_suite(
        args.file,
        concurrency=args.concurrency,
        duration=args.duration,
        repetitions=args.repetitions,
        topology=args.topology,
        client=args.client,
        server=args.server,
    )  # fmt: skip  (validated whole before anything is touched)
    # The guests (the lab's, or probes on the target's bridge) and the switch the suite drives: chosen once.
    with suite_measurement(s.guest_needs, args) as m:
        run = suites.SuiteRun(m.host, m.guests, s, suites.run_dir(m.host, s.name, Path(args.out) if args.out else None),
                              Progress(quiet=args.json), timeout=args.timeout)  # fmt: skip
        out_dir = run.out_dir
        run.check()  # refuse missing or different guests before connecting anywhere
        doc = _run_stoppable(run)
    if args.json:
        render.print_json(run_json(out_dir, doc))
    else:
        print(suites.report_text(doc))
        print(f"\nrun directory: {out_dir}  (hvnet suite report {out_dir})")
    return EXIT_OK if doc.state == "complete" else EXIT_FAILED


def run_json(out_dir: Path, doc: Any) -> dict[str, Any]:
    """``suite run --json``: document ``hvnet.suite.run``, where the run is and how it ended."""
    return documents.SUITE_RUN.stamp({"run": str(out_dir), "state": doc.state, "steps": len(doc.steps)})


def _run_stoppable(run: Any) -> Any:
    """Run with SIGINT/SIGTERM/SIGHUP stopping it cleanly: instances stopped by PID, policy restored,
    netserver stopped, partial results saved (and the probes removed by the caller's ``with``)."""
    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in stop_signals}

    def on_signal(signum: int, frame: Any) -> None:
        # The handler stays: a second signal must not cut the clean-up short.
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        run.stop(f"interrupted ({name})")

    for sig in stop_signals:
        signal.signal(sig, on_signal)
    try:
        return run.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_report(args: argparse.Namespace) -> int:
    from appliance.services import suites

    if args.out and args.format != "flent":
        from appliance.core.errors import UsageError

        raise UsageError("--out DIR is where --format flent writes its files", hint="add --format flent")
    if args.against:
        return _report_against(args)
    if args.format == "markdown":
        from appliance.core.errors import UsageError

        raise UsageError("--format markdown writes a run beside a study: it needs --against STUDY",
                         hint="hvnet suite report RUN --against STUDY --format markdown")  # fmt: skip
    if args.format == "flent":
        return _report_flent(args)
    target = _html_target(args)
    doc = suites.load_run(args.run)
    if target is not None:
        from appliance.core import htmlpage

        htmlpage.write(target, suites.report_page(doc, args.run, plots=not args.no_plots))
        print(f"report: {target}")
        return EXIT_OK
    if args.json:
        render.print_json(doc.to_json())
        return EXIT_OK
    print(suites.report_text(doc))
    if not args.no_plots:
        missing = suites.plots_missing()
        if missing is not None:
            print(f"hvnet: {missing}", file=sys.stderr)
            return EXIT_OK  # the report itself is printed
        for p in suites.write_plots(doc, args.run):
            print(f"plot: {p}")
    return EXIT_OK


def _report_flent(args: argparse.Namespace) -> int:
    """``--format flent``: one .flent.gz per measured repetition of a stream step; what was left out on stderr."""
    from appliance.core.errors import UsageError
    from appliance.services import suites

    if args.html or args.json:
        raise UsageError("--format flent writes flent files; it prints no report", hint="drop --html/--json")
    ex = suites.export_flent(suites.load_run(args.run), args.run, args.out)
    for path, plot in ex.files:
        print(f"flent: {path}  (flent -i FILE -p {plot})")
    for note in ex.notes:
        print(f"hvnet: {note}", file=sys.stderr)
    return EXIT_OK


def _report_against(args: argparse.Namespace) -> int:
    from appliance.core.errors import UsageError
    from appliance.services import suites

    if args.html:
        raise UsageError("--against prints the study beside the run; it writes no HTML", hint="drop --html")
    if args.format == "flent":
        raise UsageError("--format flent writes a run's own series; a study has none", hint="drop --against")
    if args.format == "markdown":
        if args.json:
            raise UsageError("--format markdown is a page, not JSON", hint="drop --json")
        print(suites.findings_page(suites.load_run(args.run), args.against), end="")
        return EXIT_OK
    result = suites.against(suites.load_run(args.run), args.against)
    if args.json:
        render.print_json(documents.SUITE_AGAINST.stamp(result.to_json()))
    else:
        print(result.text())
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from appliance.services import suites

    target = _html_target(args)
    junit_target = _file_target(args.junit, "--junit") if args.junit else None
    base, new = suites.load_run(args.base), suites.load_run(args.new)
    result = suites.compare(base, new, threshold_pct=args.threshold)
    if args.json:
        render.print_json(documents.SUITE_COMPARE.stamp(result.to_json()))
    else:
        print(suites.compare_text(result))
    if target is not None:
        from appliance.core import htmlpage

        htmlpage.write(target, suites.compare_page(result, base, new, (args.base, args.new)))
        print(f"report: {target}", file=sys.stderr if args.json else sys.stdout)
    if junit_target is not None:
        from appliance.core import htmlpage

        htmlpage.write(junit_target, suites.compare_junit(result, new), option="--junit")
        print(f"junit: {junit_target}", file=sys.stderr if args.json else sys.stdout)
    return EXIT_FAILED if result.regressions else EXIT_OK


def _file_target(path: str, option: str) -> Path:
    """A FILE option's target, checked writable before anything is read or computed."""
    from appliance.core import htmlpage

    return htmlpage.check_target(path, option)


def _html_target(args: argparse.Namespace) -> Optional[Path]:
    """``--html FILE``, checked writable before anything is read or drawn."""
    if not getattr(args, "html", None):
        return None
    from appliance.core import htmlpage

    return htmlpage.check_target(args.html)


def cmd_list(args: argparse.Namespace) -> int:
    from appliance.frontdoor.hosts import host_of
    from appliance.services import suites

    shipped = suites.shipped_suites()
    where = Path(args.runs) if args.runs else host_of(args).paths.runs_dir
    runs = suites.list_runs(host_of(args), where)
    if args.json:
        render.print_json(list_json(shipped, runs))
        return EXIT_OK
    rows = [[x.name, "-" if x.error else str(x.steps), "-" if x.error else f"{x.minutes:.1f}",
             x.error or x.description] for x in shipped]  # fmt: skip
    print(render.table(["suite", "steps", "min (at least)", "description"], rows))
    if runs:
        print(f"\nruns in {where}:")
        print(
            render.table(
                ["run", "suite", "started", "state", "steps", "lost"],
                [
                    [
                        r["run"],
                        r["suite"],
                        r["started"] or "-",
                        r["state"] + (", pinned" if r.get("pinned") else ""),
                        str(r["steps"]),
                        str(r["lost"]),
                    ]
                    for r in runs
                ],
            )
        )
    else:
        print(f"\nno runs in {where}")
    return EXIT_OK


def list_json(shipped: list[Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``suite list --json``: document ``hvnet.suite.list``, the shipped suites and the runs kept."""
    return documents.SUITE_LIST.stamp({"suites": [x.to_json() for x in shipped], "runs": runs})


def validate_json(s: Any) -> dict[str, Any]:
    """``suite validate --json``: document ``hvnet.suite.validate`` (a file with problems is an error, exit 2)."""
    return documents.SUITE_VALIDATE.stamp({"file": str(s.file), "valid": True, "tests": len(s.tests),
                                           "cases": len(s.cases), "steps": len(s.steps()),
                                           "estimated_at_least_s": s.estimated_seconds()})  # fmt: skip


def cmd_validate(args: argparse.Namespace) -> int:
    from appliance.services import suites

    s = suites.load_suite(args.file)  # an invalid file is a ConfigError: exit 2, JSON under --json
    if args.json:
        render.print_json(validate_json(s))
        return EXIT_OK
    print(
        f"{s.file}: valid: {len(s.tests)} test(s), {len(s.cases)} case(s), {len(s.steps())} step(s), "
        f"at least {s.estimated_seconds() / 60:.1f} min"
    )
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("suite", help="netperf suites: run, report, compare, list, prune")
    ss = p.add_subparsers(dest="suite_command", metavar="COMMAND", required=True)

    r = ss.add_parser("run", help="run a suite (a file, or a shipped suite's name) and save a run directory")
    r.add_argument("file", metavar="SUITE", help="suite YAML, or the name of a shipped suite (e.g. quick)")
    r.add_argument(
        "--out", metavar="DIR", help="run directory (default $HVNET_RUNS_DIR or /var/lib/hvnet/runs, then SUITE-TIME)"
    )
    r.add_argument(
        "--concurrency", type=_override("concurrency"), metavar="N,N", help="replace every test's concurrency list"
    )
    r.add_argument(
        "--duration",
        type=_override("duration", "--duration"),
        metavar="S",
        help="replace every test's duration (seconds)",
    )
    r.add_argument(
        "--repetitions",
        type=_override("repetitions", "--repetitions"),
        metavar="N",
        help="replace every test's repetitions",
    )
    r.add_argument("--topology", metavar="FILE", help="run on this lab topology's guests instead of the suite's")
    r.add_argument("--client", metavar="GUEST", help="the guest that runs netperf (namespace or QEMU guest)")
    r.add_argument("--server", metavar="GUEST", help="the guest hvnet starts netserver in")
    r.add_argument("--json", action="store_true", help="print only the run directory and state as JSON")
    r.set_defaults(func=cmd_run)

    rp = ss.add_parser("report", help="print a run's tables and write its plots (no re-run)")
    rp.add_argument("run", metavar="RUN", help="run directory")
    rp.add_argument("--no-plots", action="store_true", help="skip the plots (PNG files, or SVG in --html)")
    rp.add_argument("--against", metavar="STUDY", help="only the run beside a study's tables and conclusions, "
                    "no plots (with --json: as JSON); STUDY: " + ", ".join(STUDIES))  # fmt: skip
    rp.add_argument(
        "--format",
        choices=("text", "flent", "markdown"),
        default="text",
        help="flent: write one .flent.gz per repetition of each netperf stream step, for flent's plots; "
        "markdown (with --against): the run beside the study as a findings page of the manual",
    )
    rp.add_argument("--out", metavar="DIR", help="with --format flent: where (default RUN/flent)")  # fmt: skip
    out = rp.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print results.json")
    out.add_argument("--html", metavar="FILE", help="write one self-contained HTML report instead (tables, SVG plots)")
    rp.set_defaults(func=cmd_report)

    c = ss.add_parser("compare", help="compare two runs; exit 1 on a significant regression beyond the threshold")
    c.add_argument("base", metavar="BASE", help="the reference run directory")
    c.add_argument("new", metavar="NEW", help="the run to judge")
    c.add_argument("--threshold", type=_threshold, default=5.0, metavar="PCT", help="tolerated change (default 5%%)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report with a compare plot")
    c.add_argument("--junit", metavar="FILE", help="also write JUnit XML: a test case per step and figure, for CI")
    c.set_defaults(func=cmd_compare)

    ls = ss.add_parser("list", help="shipped suites and past runs")
    ls.add_argument("--runs", metavar="DIR", help="where runs are kept (default $HVNET_RUNS_DIR)")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=cmd_list)

    v = ss.add_parser("validate", help="check a suite file and print what it would run; runs nothing")
    v.add_argument("file", metavar="SUITE")
    v.add_argument("--json", action="store_true", help="machine-readable output (problems: JSON on stderr, exit 2)")
    v.set_defaults(func=cmd_validate)

    cli_suite_runs.register(ss)  # prune, pin, unpin


def _threshold(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"threshold must be a percentage, not {text!r}") from None
    if not 0 <= v <= 1000:
        raise argparse.ArgumentTypeError("threshold must be 0..1000 (%)")
    return v
