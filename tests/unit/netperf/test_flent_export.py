"""A run's streams as flent files: read back with flent's own reader (flent 2.3.0, from PyPI) and drawn by
flent's own plotting, headless; a run recorded before every step kept interim results exports its
aggregates and says so; steps flent has no test for are left out, named."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.netperf.parse import omni
from appliance.netperf.report import flent as flent_export
from appliance.netperf.store import results
from appliance.netperf.store.records import SuiteResult

resultset = pytest.importorskip("flent.resultset")

DATA = Path(__file__).parents[1] / "data" / "netperf"
QUICK = DATA / "quick-results.json"  # a real run, recorded before every step kept interim results


def with_series() -> tuple[SuiteResult, list[float | None]]:
    """The quick run with its first TCP_STREAM repetition's series from a real lab capture (-D 1)."""
    doc = results.load(QUICK)
    series = omni.aligned_series([omni.parse_interim((DATA / "omni-demo-interim-lab-tcp-stream.out").read_text())], [0])
    assert series is not None
    doc.steps[0].repetitions[0].throughput_series = series
    return doc, series


def test_a_stream_repetition_reads_back_in_flent_with_its_series(tmp_path: Path) -> None:
    doc, series = with_series()
    paths = flent_export.write(flent_export.export(doc), tmp_path)
    step, rep = doc.steps[0], doc.steps[0].repetitions[0]
    first = tmp_path / f"000-tcp-stream_default_m10000_c1-rep1{flent_export.SUFFIX}"
    assert paths[0] == first
    r = resultset.load(str(first))
    assert r.meta("NAME") == "tcp_1up_noping" and r.series_names == ["TCP upload"]
    assert r.x_values == [float(i + 1) for i in range(len(series))] and len(series) == 9
    assert r.series("TCP upload") == series and all(v is not None for v in series)
    raw = list(r.raw_series("TCP upload"))  # flent's plots read these: seconds from T0
    assert [x for x, _ in raw] == r.x_values and [v for _, v in raw] == series
    meta = r.meta("HVNET")
    assert meta["suite"] == "quick" and meta["step"] == step.key and meta["type"] == "TCP_STREAM"
    assert meta["client"] == "VM1" and meta["server"] == "VM2" and meta["interim_results"] is True
    assert meta["aggregate_mbps"] == rep.aggregate.sum and r.meta("HOST") == "192.168.0.151"
    assert r.meta("SERIES_META")["TCP upload"]["MEAN_VALUE"] == rep.aggregate.sum
    assert r.meta("T0").isoformat() == "2026-11-23T13:04:16" and r.meta("FLENT_VERSION") is None
    assert "summed over the step's 1 instance(s)" in r.meta("NOTE")


def test_a_run_without_interim_results_exports_its_aggregates_and_says_so(tmp_path: Path) -> None:
    doc = results.load(QUICK)
    ex = flent_export.export(doc)
    assert any(n.startswith("12 repetition(s) recorded no interim results") for n in ex.notes)
    flent_export.write(ex, tmp_path)
    udp = resultset.load(str(tmp_path / "002-udp-stream_default_m1400_c1-rep2.flent.gz"))
    rep = doc.steps[2].repetitions[1]
    assert udp.meta("NAME") == "udp_flood" and udp.series("UDP upload") == [None]  # no series, never made up
    assert list(udp.raw_series("UDP upload")) == []
    # the series is what the client sent, so its aggregate is the sent rate; what arrived is beside it
    assert udp.meta("SERIES_META")["UDP upload"]["MEAN_VALUE"] == rep.aggregate.sent_mbps
    assert udp.meta("HVNET")["aggregate_mbps"] == rep.aggregate.sum and udp.meta("HVNET")["interim_results"] is False
    assert "no interim results were recorded" in udp.meta("NOTE")


def test_steps_flent_has_no_test_for_are_left_out_and_named() -> None:
    ex = flent_export.export(results.load(QUICK))
    assert len(ex.files) == 4 * 3  # TCP_STREAM and UDP_STREAM at two concurrencies, three repetitions each
    for kind in ("TCP_RR", "TCP_CRR", "UDP_RR"):
        assert any(n.startswith(f"not exported: 2 {kind} step(s)") for n in ex.notes)


def test_a_hostile_step_key_is_a_plain_file_name(tmp_path: Path) -> None:
    doc, _ = with_series()
    doc.steps[0].key = "../../etc/<x>&\"'\x07/c1"
    (path,) = flent_export.write(flent_export.Export([flent_export.export(doc).files[0]]), tmp_path)
    assert path.parent == tmp_path and path.name == "000-etc_x_c1-rep1.flent.gz"
    assert resultset.load(str(path)).meta("HVNET")["step"] == doc.steps[0].key  # the name itself, as data


def test_a_link_planted_at_a_file_name_is_not_followed(tmp_path: Path) -> None:
    doc, _ = with_series()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "000-tcp-stream_default_m10000_c1-rep1.flent.gz").symlink_to(victim)
    with pytest.raises(OSError):
        flent_export.write(flent_export.export(doc), out)
    assert victim.read_text() == "precious\n"


def test_flent_draws_the_exported_file(tmp_path: Path) -> None:
    """flent's own plot of the file (its tcp_1up_noping test's ``totals``), headless, to a PNG."""
    doc, _ = with_series()
    (path, *_) = flent_export.write(flent_export.export(doc), tmp_path)
    png = tmp_path / "totals.png"
    env = {**os.environ, "MPLBACKEND": "Agg", "HOME": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "flent", "-i", str(path), "-p", "totals", "-o", str(png)],
                         capture_output=True, text=True, timeout=120, env=env, check=False)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_cli_writes_the_files_and_says_what_was_left_out(tmp_path: Path, capsys) -> None:
    out = tmp_path / "flent"
    assert main(["suite", "report", str(QUICK), "--format", "flent", "--out", str(out)]) == 0
    got = capsys.readouterr()
    lines = got.out.splitlines()
    assert len(lines) == 12 and lines[0] == f"flent: {out / '000-tcp-stream_default_m10000_c1-rep1.flent.gz'}  " \
        "(flent -i FILE -p totals)"  # fmt: skip
    assert "not exported: 2 TCP_RR step(s)" in got.err and "no interim results" in got.err
    assert len(list(out.glob("*.flent.gz"))) == 12
    with gzip.open(next(out.glob("*.flent.gz")), "rt") as fp:
        assert json.load(fp)["version"] == 4


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "{tmp}/x"], "--out DIR is where --format flent writes"),
        (["--format", "flent", "--html", "{tmp}/x.html"], "--format flent writes flent files"),
        (["--format", "flent", "--out", "{tmp}/file"], "is not a directory"),
    ],
)
def test_the_cli_refuses_what_it_cannot_do(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    (tmp_path / "file").write_text("")
    assert main(["suite", "report", str(QUICK), *(a.replace("{tmp}", str(tmp_path)) for a in argv)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_hand_edited_nan_is_a_usage_error_and_writes_nothing(tmp_path: Path) -> None:
    import json

    from appliance.core.errors import UsageError
    from appliance.services import suites

    run = tmp_path / "run"
    run.mkdir()
    doc = json.loads(QUICK.read_text())
    doc["steps"][0]["repetitions"][0]["throughput_series"] = [1.0, float("nan")]
    (run / "results.json").write_text(json.dumps(doc))  # Python writes NaN; JSON has none
    with pytest.raises(UsageError, match="not a number"):
        suites.export_flent(results.load(run), str(run))
    assert not (run / "flent").exists()  # checked before anything was made
