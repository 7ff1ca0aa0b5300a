"""The documents of the many-host wrapper, ``hosts``, ``config show`` and ``probes``, against their schemas:
``config show`` printed by hvnet itself (main() in-process), the others built by the code from the project's own
records -- a real switch's inventory (tests/unit/switch_rows.py), fleet outcomes of stub hosts, found probes."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from appliance.cli import fleet as cli_fleet
from appliance.cli import hosts as cli_hosts
from appliance.cli.main import main
from appliance.core import documents
from appliance.core.errors import OvsdbUnreachable
from appliance.core.hostlist import InventoryHost
from appliance.probes.spec import FoundProbe
from appliance.services import fleet, probes
from appliance.switch import inventory
from tests import jsonschemas
from tests.unit.core.test_documents import status_doc
from tests.unit.switch_rows import lab_switch


class _Host:
    def __init__(self, name: str) -> None:
        self.name = name

    def close(self) -> None:
        pass


def _entries(*names: str) -> list[InventoryHost]:
    return [InventoryHost(n, f"192.0.2.{i + 1}", group="rack1") for i, n in enumerate(names)]


def test_the_many_host_wrapper_validates_with_each_hosts_document() -> None:
    def work(host: _Host, entry: InventoryHost) -> tuple[dict[str, Any], int]:
        if entry.name == "down":
            raise OvsdbUnreachable("down: cannot reach the database", hint="is ovsdb-server running?")
        return status_doc(), 0

    out = fleet.run(_entries("up", "down"), work, lambda e: _Host(e.name))  # type: ignore[arg-type]
    verb = cli_fleet.Verb(work=work, result=str, detail=str, text=str, json=lambda d: d)  # type: ignore[arg-type]
    doc = json.loads(json.dumps(cli_fleet.fleet_json(out, verb, fleet.worst([o.exit for o in out]))))
    jsonschemas.check(documents.FLEET, doc)
    up, down = doc["hosts"]["up"], doc["hosts"]["down"]
    jsonschemas.check(documents.STATUS, up["result"])
    assert (doc["exit"], down["exit"], down["hint"]) == (3, 3, "is ovsdb-server running?")
    assert isinstance(up["elapsed_s"], float)
    up["seconds"] = up.pop("elapsed_s")  # as version 1 wrote it
    assert any("seconds" in p for p in jsonschemas.problems(documents.FLEET, doc))


def test_hosts_validates_for_a_reachable_and_an_unreachable_host() -> None:
    inv = inventory.read(lab_switch().snapshot(), kernel_counters=False)
    reachable = fleet.summary(inv, "none", {"policy": "/etc/hvnet/policy.yaml", "drift": 2})
    entries = _entries("hv1", "hv2")
    outcomes = [fleet.HostOutcome("hv1", 0, value=reachable, seconds=0.25),
                fleet.HostOutcome("hv2", 3, error="hv2: cannot connect over SSH", seconds=5.0)]  # fmt: skip
    rows = [cli_hosts._row(e, o) for e, o in zip(entries, outcomes)]
    doc = json.loads(json.dumps(documents.HOSTS.stamp({"inventory": "/etc/hvnet/hosts.yaml", "hosts": rows})))
    jsonschemas.check(documents.HOSTS, doc)
    assert doc["hosts"][0]["vifs"] == 2 and doc["hosts"][0]["elapsed_s"] == 0.25 and not doc["hosts"][1]["reachable"]
    del doc["hosts"][0]["vifs"]  # a reachable host says what it found
    assert jsonschemas.problems(documents.HOSTS, doc)


def test_config_show_validates(capsys, tmp_path: Path, monkeypatch) -> None:
    conf = tmp_path / "hvnet.conf"
    conf.write_text("[data]\nruns_dir = /srv/hvnet/runs\n")
    monkeypatch.setenv("HVNET_CONFIG", str(conf))
    assert main(["--no-lab", "config", "show", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschemas.check(documents.CONFIG, doc)
    assert {s["name"]: s["source"] for s in doc["settings"]}["data.runs_dir"] == f"{conf}:2"
    doc["settings"][0]["from"] = "guess"
    assert jsonschemas.problems(documents.CONFIG, doc)


def test_probes_list_and_clean_validate() -> None:
    here = os.uname().nodename
    start = Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19]
    live = FoundProbe(
        "P1", "xenbr0", "hvp-P1", f"{here}:{os.getpid()}:{start}", int(time.time()) + 600, "hvnet-probe-P1"
    )
    expired = FoundProbe("P2", "xenbr0", "hvp-P2", "elsewhere:1:1", int(time.time()) - 60, "hvnet-probe-P2")
    doc = json.loads(json.dumps(documents.PROBES_LIST.stamp({"probes": probes.listing([live, expired])})))
    jsonschemas.check(documents.PROBES_LIST, doc)
    assert [(p["stale"], bool(p["reason"])) for p in doc["probes"]] == [(False, False), (True, True)]
    doc["probes"][0]["expires"] = "in 10 minutes"
    assert jsonschemas.problems(documents.PROBES_LIST, doc)
    cleaned = documents.PROBES_CLEAN.stamp({"done": ["removed probe P2 (port hvp-P2 on xenbr0)"]})
    jsonschemas.check(documents.PROBES_CLEAN, cleaned)
    with pytest.raises(AssertionError):
        jsonschemas.check(documents.PROBES_CLEAN, {**cleaned, "done": "removed"})
