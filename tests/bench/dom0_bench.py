#!/usr/bin/env python3
"""The dom0 package's runtime against the venv (``make bench-dom0``), side by side in one run.

* size: /opt/hvnet installed (du), the RPM file, the RPM's installed size;
* ``hvnet status --json`` wall time: the installed launcher (the runtime's own CPython
  3.11, built with zig cc for glibc 2.17) against the venv's Python running this tree's
  hvnet (``python -m appliance``, the code the RPM packages), on the same lab,
  interleaved, median of N (target: within 1.2x);
* the console's first VIF table, measured as tests/bench/tui_bench.py does (Textual's
  Pilot, 120x40, from before the connection is opened until the table holds every VIF),
  by each interpreter in a process of its own; the process's wall time to that point
  (interpreter start and imports included, what an operator waits for) beside it.

Needs root, OVS and the RPM 'make rpm-dom0' built; it brings the built-in lab up and down
itself, so run it under the lab lock:

    flock /tmp/hvnet-lab.lock .venv/bin/python tests/bench/dom0_bench.py [--rpm FILE] [-n N]

``--no-lab`` measures what needs no switch instead: ``hvnet --version`` (interpreter start),
importing the CLI and the console (most of a command's start), and a pure-Python loop (the
interpreter's own speed: Debian's CPython is built with PGO and LTO, the runtime without).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.endpoints.topology import DEFAULT_TOPOLOGY  # noqa: E402
from appliance.endpoints.topology import load as load_topology  # noqa: E402
from appliance.lab import Lab  # noqa: E402

TARGET = 1.2

# Run by each interpreter: the first complete VIF table through the Pilot; prints
# "<seconds in the app> <the wall clock when the table was complete>".
FIRST_TABLE = """
import asyncio, sys, time
from appliance.frontdoor.hosts import build_host
from appliance.switch import api
from tui.app import HvnetApp
from tui.widgets.vif_table import VifTable

async def main(want):
    started = time.perf_counter()
    app = HvnetApp(api.connect(build_host(), sync=False))
    async with app.run_test(size=(120, 40)) as pilot:
        while True:
            tables = app.screen.query(VifTable)
            if tables and tables.first().row_count >= want:
                await pilot.pause()
                return time.perf_counter() - started, time.time()
            if time.perf_counter() - started > 30:
                sys.exit("the VIF table never filled")
            await asyncio.sleep(0.005)

print(*asyncio.run(main(int(sys.argv[1]))))
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    elapsed = time.perf_counter() - started
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:3])}... failed ({res.returncode}): {res.stderr[-2000:]}")
    return elapsed, res.stdout


def du(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def mib(n: float) -> str:
    return f"{n / 2**20:6.1f} MiB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rpm", type=Path, help="the hvnet-dom0 RPM (default: the newest in build/rpms)")
    p.add_argument("--venv-python", type=Path, default=Path(sys.executable),
                   help="the venv's Python to compare with (default: the one running this)")  # fmt: skip
    p.add_argument("-n", type=int, default=9, help="repetitions of each measurement (default 9)")
    p.add_argument("--no-lab", action="store_true", help="only what needs no switch (no root, no OVS)")
    args = p.parse_args()
    rpm = args.rpm or max(ROOT.glob("build/rpms/hvnet-dom0-*.x86_64.rpm"), key=os.path.getmtime, default=None)
    if rpm is None or not rpm.exists():
        raise SystemExit("no hvnet-dom0 RPM: build it with 'make rpm-dom0' (or give --rpm)")
    if os.geteuid() != 0 and not args.no_lab:
        raise SystemExit("needs root (the lab: namespaces, OVS); --no-lab measures without it")

    with tempfile.TemporaryDirectory(prefix="hvnet-bench-dom0-") as tmp:
        scratch = Path(tmp) / "root"
        res = subprocess.run(["rpm", "--root", str(scratch), "--nodeps", "--noscripts", "-i", str(rpm)],
                             capture_output=True, text=True, check=False)  # fmt: skip
        if res.returncode != 0:
            raise SystemExit(f"rpm --root {scratch} -i {rpm.name} failed: {res.stderr}")
        installed = subprocess.run(["rpm", "-qp", "--qf", "%{SIZE}", str(rpm)], capture_output=True, text=True,
                                   check=True).stdout  # fmt: skip
        lines = [
            f"hvnet-dom0 ({rpm.name}) against the venv ({args.venv_python}), "
            + ("same run, no switch" if args.no_lab else "same lab, same run"),
            f"  /opt/hvnet on disk (du)                  {mib(du(scratch / 'opt' / 'hvnet'))}",
            f"  the RPM file (xz -9)                     {mib(rpm.stat().st_size)}",
            f"  the RPM's installed size (all files)     {mib(int(installed))}",
        ]
        if args.no_lab:
            lines += measure_without_switch(scratch, args.venv_python, args.n)
            print("\n".join(lines))
            return
        run_dir = Path(tmp) / "lab"
        env = {**os.environ, "HVNET_LAB_DIR": str(run_dir)}
        os.environ["HVNET_LAB_DIR"] = str(run_dir)
        lab = Lab(run_dir)
        try:
            lab.up(load_topology(DEFAULT_TOPOLOGY))
            lines += measure(scratch, args.venv_python, env, args.n)
        finally:
            Lab(run_dir).down()
            shutil.rmtree(scratch, ignore_errors=True)
    print("\n".join(lines))


IMPORTS = "import appliance.cli.main, appliance.services.status, tui.app"
LOOP = "import time; t = time.perf_counter(); sum(i * i for i in range(2_000_000)); print(time.perf_counter() - t)"


def measure_without_switch(scratch: Path, venv_python: Path, n: int) -> list[str]:
    env = {**os.environ, "HVNET_LAB_DIR": "/nonexistent"}
    venv_env = {**env, "PYTHONPATH": str(ROOT)}
    runtime = [str(scratch / "opt" / "hvnet" / "python" / "bin" / "python3"), "-I"]
    venv = [str(venv_python)]
    cases = {
        "hvnet --version": (
            [str(scratch / "usr" / "bin" / "hvnet"), "--version"],
            [*venv, "-m", "appliance", "--version"],
        ),
        "import the CLI and the console": ([*runtime, "-c", IMPORTS], [*venv, "-c", IMPORTS]),
    }
    got: dict[str, dict[str, list[float]]] = {k: {"dom0": [], "venv": []} for k in [*cases, "loop"]}
    for argv_d, argv_v in cases.values():  # warm
        timed(argv_d, env)
        timed(argv_v, venv_env)
    for _ in range(n):  # interleaved
        for label, (argv_d, argv_v) in cases.items():
            got[label]["dom0"].append(timed(argv_d, env)[0])
            got[label]["venv"].append(timed(argv_v, venv_env)[0])
        got["loop"]["dom0"].append(float(timed([*runtime, "-c", LOOP], env)[1]))
        got["loop"]["venv"].append(float(timed([*venv, "-c", LOOP], venv_env)[1]))
    return [
        f"  {'(runtime vs venv, median of ' + str(n) + '; no switch)':<40}",
        *(_row(label, got[label]) for label in cases),
        _row("pure-Python loop (2e6 squares), in process", got["loop"]),
    ]


def _row(label: str, d: dict[str, list[float]], target: float | None = None) -> str:
    r, v = statistics.median(d["dom0"]), statistics.median(d["venv"])
    verdict = "" if target is None else f"; target <= {target}x: {'MET' if r <= target * v else 'NOT MET'}"
    return f"  {label:<40} {r * 1000:7.1f} ms vs {v * 1000:7.1f} ms   ({r / v:.2f}x{verdict})"


def measure(scratch: Path, venv_python: Path, env: dict[str, str], n: int) -> list[str]:
    import json

    venv_env = {**env, "PYTHONPATH": str(ROOT)}  # the venv runs this tree's hvnet; the runtime its packaged copy
    dom0 = [str(scratch / "usr" / "bin" / "hvnet")]
    venv = [str(venv_python), "-m", "appliance"]
    _, out = timed([*venv, "status", "--json"], venv_env)
    want = len(json.loads(out)["vifs"])
    runtime_py = str(scratch / "opt" / "hvnet" / "python" / "bin" / "python3")
    venv_py = str(venv_python)
    timed([*dom0, "status", "--json"], env)  # warm both (page cache, bytecode)
    timed([*venv, "status", "--json"], venv_env)
    status: dict[str, list[float]] = {"dom0": [], "venv": []}
    inner: dict[str, list[float]] = {"dom0": [], "venv": []}
    whole: dict[str, list[float]] = {"dom0": [], "venv": []}
    for _ in range(n):  # interleaved, so both see the same machine load
        status["dom0"].append(timed([*dom0, "status", "--json"], env)[0])
        status["venv"].append(timed([*venv, "status", "--json"], venv_env)[0])
        for name, argv, e in (("dom0", [runtime_py, "-I"], env), ("venv", [venv_py], venv_env)):
            launched = time.time()
            _, out = timed([*argv, "-c", FIRST_TABLE, str(want)], e)
            in_app, shown = (float(x) for x in out.split())
            inner[name].append(in_app)
            whole[name].append(shown - launched)  # interpreter start and imports included

    return [
        f"  {'(runtime vs venv, median of ' + str(n) + ')':<40}",
        _row("hvnet status --json, wall time", status, TARGET),
        _row(f"console: first table ({want} VIFs), in app", inner),
        _row("console: process start -> first table", whole, TARGET),
    ]


if __name__ == "__main__":
    main()
