"""The capture documents against their schemas: ``capture.json`` (written now, and as version 1 wrote it),
``capture show``/``stop``/``list``/``delete``/``fetch --json``, each built by the code from a real capture's
record, tcpdump's real ``/proc`` figures and the disk check, the way tests/unit/capture builds them."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from appliance.capture import disk, upgrade
from appliance.capture import limits as cap_limits
from appliance.capture import record as rec_mod
from appliance.capture.fetch import Fetched
from appliance.capture.record import CaptureRecord
from appliance.capture.spec import CaptureSpec, Limits, check_limits
from appliance.capture.view import CaptureView
from appliance.cli import capture as cli_capture
from appliance.cli.main import main
from appliance.core import documents
from appliance.core.errors import HvnetError
from tests import jsonschemas

DATA = Path(__file__).resolve().parents[1] / "data" / "captures"
HZ = 100


def v1_record() -> dict[str, Any]:
    """A real capture's capture.json, as an hvnet before version 2 wrote it ("format": 1)."""
    return json.loads((DATA / "vif2.capture.json").read_text())


def full_record() -> CaptureRecord:
    """The real record with every figure a capture records: a time-rotated capture's limits, its disk check,
    tcpdump's CPU read from an exited tcpdump's /proc files."""
    rec = CaptureRecord.from_json(v1_record())
    lim = check_limits(Limits(snaplen=96, rotate_seconds=60, max_mb=200, buffer_kib=8192, count=1000, duration=30))
    rec.spec = CaptureSpec(rec.spec.name, "port", "vif2.0", "vif2.0", "vif2.0", "icmp", lim)
    space = disk.Space(free=5_000_000_000, total=20_000_000_000)
    rec.disk = disk.check_fits("/var/lib/hvnet/captures", space, lim, disk.parse_floor("10%"), "default")
    rec.disk["free_at_stop"] = 4_000_000_000
    stat, uptime = (DATA / "tcpdump-exited.stat").read_text(), (DATA / "tcpdump-exited.uptime").read_text()
    rec.tcpdump_cpu = cap_limits.cpu_figures(stat, uptime, HZ)
    return rec


def test_a_record_written_now_validates_with_units_in_its_keys_and_reads_back(tmp_path: Path) -> None:
    rec = full_record()
    doc = json.loads(json.dumps(rec.to_json()))
    jsonschemas.check(documents.CAPTURE, doc)
    assert (doc["schema"], doc["version"]) == ("hvnet.capture", 2) and "format" not in doc
    assert doc["spec"]["limits"] == {"snaplen_bytes": 96, "duration_s": 30, "count_packets": 1000,
                                     "rotate_bytes": None, "rotate_files": None, "rotate_s": 60,
                                     "max_bytes": 200_000_000, "buffer_bytes": 8192 * 1024}  # fmt: skip
    assert doc["tcpdump_cpu"] == {"cpu_s": 0.72, "lifetime_s": 2.54, "core_pct": 28.3}
    assert (
        doc["disk"]["free_at_stop_bytes"] == 4_000_000_000 and doc["disk"]["worst_case_bytes"] == 112_024
    )  # --count bounds it
    rec.directory = str(tmp_path)
    rec_mod.save(rec)
    again = rec_mod.load(tmp_path)
    assert again == rec and again.spec.limits.max_mb == 200  # the code keeps tcpdump's units
    broken = copy.deepcopy(doc)
    broken["spec"]["limits"] = upgrade._back(broken["spec"]["limits"], upgrade.LIMITS_1_TO_2)  # the old names
    assert any("rotate_seconds" in p for p in jsonschemas.problems(documents.CAPTURE, broken))


def test_a_version_1_record_loads_upgraded_and_is_not_a_version_2_one(tmp_path: Path) -> None:
    old = v1_record()
    assert "format" in old and "schema" not in old
    assert jsonschemas.problems(documents.CAPTURE, old)
    (tmp_path / "capture.json").write_text(json.dumps(old))
    rec = rec_mod.load(tmp_path)
    assert rec.state == "stopped" and rec.spec.limits == Limits() and rec.tcpdump["captured"] == 113
    jsonschemas.check(documents.CAPTURE, json.loads(json.dumps(rec.to_json())))
    # a ring capture of version 1: its MB become bytes, its seconds keep their value
    ring = {**old, "spec": {**old["spec"], "limits": {"rotate_mb": 100, "rotate_files": 10, "duration": 5.5}},
            "disk": {"worst_case": 1_000_002_000, "bound": "a ring", "floor": 10, "floor_setting": "10%",
                     "floor_source": "default", "free_at_start": 50, "filesystem_size": 100},
            "tcpdump_cpu": {"seconds": 0.5, "lifetime_s": 2.0, "pct_of_core": 25.0}}  # fmt: skip
    up = upgrade.upgrade(ring)
    assert up["spec"]["limits"] == {"rotate_bytes": 100_000_000, "rotate_files": 10, "duration_s": 5.5}
    assert (up["disk"]["worst_case_bytes"], up["disk"]["filesystem_bytes"]) == (1_000_002_000, 100)
    assert up["tcpdump_cpu"] == {"cpu_s": 0.5, "lifetime_s": 2.0, "core_pct": 25.0}
    assert ring["spec"]["limits"]["rotate_mb"] == 100  # the document read is not changed
    rec = CaptureRecord.from_json(ring)
    assert (rec.spec.limits.rotate_mb, rec.disk["worst_case"], rec.tcpdump_cpu["pct_of_core"]) == (100, 1_000_002_000,
                                                                                                   25.0)  # fmt: skip


def test_a_record_of_an_unknown_version_or_unit_is_refused_naming_the_file(tmp_path: Path) -> None:
    doc = full_record().to_json()
    for bad, why in (({**doc, "version": 3}, "capture record version 3; this hvnet reads versions 1 to 2"),
                     ({**doc, "schema": "hvnet.status"}, "not a capture record"),
                     ({**doc, "spec": {**doc["spec"], "limits": {"rotate_bytes": 1500}}},
                      "rotate_bytes: 1500 is not a whole multiple of 1000000")):  # fmt: skip
        (tmp_path / "capture.json").write_text(json.dumps(bad))
        with pytest.raises(HvnetError, match=f"{tmp_path}/capture.json: unreadable capture record: .*{why}"):
            rec_mod.load(tmp_path)


def _view(rec: CaptureRecord) -> CaptureView:
    return CaptureView(rec, "stopped", rec.reason, packets=113, dropped=0, seconds=1.8, bytes=12_345)


def test_capture_show_and_list_validate() -> None:
    rec = full_record()
    shown = json.loads(json.dumps(_view(rec).to_json()))
    jsonschemas.check(documents.CAPTURE_SHOW, shown)
    assert (shown["elapsed_s"], shown["dropped_packets"], shown["rate_packets_per_s"]) == (1.8, 0, 113 / 1.8)
    listed = json.loads(json.dumps(cli_capture.list_json("/var/lib/hvnet/captures", [_view(rec), _view(rec)])))
    jsonschemas.check(documents.CAPTURE_LIST, listed)
    assert "schema" not in listed["captures"][0]
    shown["rate_pps"] = shown.pop("rate_packets_per_s")
    assert any("rate_pps" in p for p in jsonschemas.problems(documents.CAPTURE_SHOW, shown))
    listed["captures"][0]["seconds"] = 1.8
    assert jsonschemas.problems(documents.CAPTURE_LIST, listed)


def test_capture_delete_and_fetch_validate(capsys, tmp_path: Path, monkeypatch) -> None:
    pcaps = tmp_path / "captures"
    (pcaps / "vif2-cap").mkdir(parents=True)
    shutil.copy(DATA / "vif2.capture.json", pcaps / "vif2-cap" / "capture.json")
    monkeypatch.setenv("HVNET_PCAP_DIR", str(pcaps))
    assert main(["--no-lab", "capture", "show", "vif2-cap", "--json"]) == 0
    jsonschemas.check(documents.CAPTURE_SHOW, json.loads(capsys.readouterr().out))  # a version 1 record, shown
    assert main(["--no-lab", "capture", "list", "--json"]) == 0
    jsonschemas.check(documents.CAPTURE_LIST, json.loads(capsys.readouterr().out))
    assert main(["--no-lab", "capture", "delete", "vif2-cap", "--json"]) == 0
    deleted = json.loads(capsys.readouterr().out)
    jsonschemas.check(documents.CAPTURE_DELETE, deleted)
    assert jsonschemas.problems(documents.CAPTURE_DELETE, {**deleted, "removed": 1})
    fetched = Fetched("vif2", "/var/lib/hvnet/captures/vif2", tmp_path, [("vif2.pcap0", 1000), ("vif2.pcap1", 24)])
    doc = json.loads(json.dumps(fetched.to_json()))
    jsonschemas.check(documents.CAPTURE_FETCH, doc)
    assert doc["bytes"] == 1024
    doc["files"][0]["size_kib"] = 1
    assert jsonschemas.problems(documents.CAPTURE_FETCH, doc)
