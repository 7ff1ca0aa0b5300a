"""The built-in lab's documents against their schemas: ``lab status`` read by the lab's own code from a lab's
record (a run directory holding the lab.json ``lab up`` writes, its daemons not running), ``lab up``/``down``
from the lab's report, ``lab image`` from the image record of files on disk."""

from __future__ import annotations

import json
from pathlib import Path

from appliance.cli import lab as cli_lab
from appliance.core import documents, labstate
from appliance.lab import Lab
from appliance.lab.core import LabReport
from appliance.lab.vm.image import ProbeImage, compute_digest
from tests import jsonschemas

RECORD = {
    "topology": "default", "topology_file": None, "digest": "0" * 64, "db": None, "hypervisor": "xenserver",
    "hosts": [], "vm_access": False, "vm_names": {"u1": "VM1"},
    "guests": [{"name": "VM1", "kind": "netns", "host": None, "namespace": "hvnet-lab-VM1", "vif": "vif1.0",
                "bridge": "xenbr0", "ip": "10.0.0.1/24", "mac": "02:00:00:00:00:01", "vm_uuid": "u1"}],
}  # fmt: skip


def _lab(tmp_path: Path) -> Lab:
    run = tmp_path / "lab"
    run.mkdir()
    (run / labstate.STATE_FILE).write_text(json.dumps(RECORD))
    return Lab(run)


def test_lab_status_validates_down_and_partial(tmp_path: Path) -> None:
    down = documents.LAB_STATUS.stamp(Lab(tmp_path / "none").status(reach=True))
    jsonschemas.check(documents.LAB_STATUS, json.loads(json.dumps(down)))
    assert down["state"] == "down" and down["guests"] == []
    st = json.loads(json.dumps(documents.LAB_STATUS.stamp(_lab(tmp_path).status(reach=True))))
    jsonschemas.check(documents.LAB_STATUS, st)
    assert st["state"] == "partial" and st["daemons"] == {"ovsdb-server": None, "ovs-vswitchd": None}
    assert st["guests"][0]["namespace_present"] is False
    st["daemons"]["ovsdb-server"] = "running"
    assert jsonschemas.problems(documents.LAB_STATUS, st)


def test_lab_up_and_down_validate(tmp_path: Path) -> None:
    lab = _lab(tmp_path)
    report = LabReport(lab.db, ["started ovsdb-server and ovs-vswitchd"], lab.status()["guests"])
    up = json.loads(json.dumps(cli_lab.up_json(report)))
    jsonschemas.check(documents.LAB_UP, up)
    assert up["guests"][0]["name"] == "VM1"
    del up["guests"][0]["vif_present"]
    assert jsonschemas.problems(documents.LAB_UP, up)
    down = documents.LAB_DOWN.stamp({"actions": LabReport(lab.db, ["stopped ovs-vswitchd"]).actions})
    jsonschemas.check(documents.LAB_DOWN, down)


def test_lab_image_validates_with_its_time_in_seconds(tmp_path: Path) -> None:
    kernel, initrd = tmp_path / "vmlinuz", tmp_path / "initrd.cpio.gz"
    kernel.write_bytes(b"k" * 1000)
    initrd.write_bytes(b"i" * 500)
    image = ProbeImage(kernel, initrd, compute_digest({"kernel": "6.1"}), built=False, seconds=0.0123,
                       manifest={"kernel_package": "linux-image-6.1.0-18-amd64"})  # fmt: skip
    doc = json.loads(json.dumps(documents.LAB_IMAGE.stamp(image.to_json())))
    jsonschemas.check(documents.LAB_IMAGE, doc)
    assert (doc["elapsed_s"], doc["kernel_bytes"], doc["initrd_bytes"]) == (0.012, 1000, 500)
    doc["seconds"] = doc.pop("elapsed_s")  # as version 1 wrote it
    assert any("seconds" in p for p in jsonschemas.problems(documents.LAB_IMAGE, doc))
