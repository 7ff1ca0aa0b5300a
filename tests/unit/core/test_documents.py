"""The published JSON Schemas against the real documents: each output, built by the code from captured inputs
the way the other unit tests build it, validates against its schema file; the same output with a key in the
old unit style does not.  And the registry, the files and the reference page name the same documents."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from appliance.cli.policy import plan_json
from appliance.core import documents
from appliance.core.errors import ConfigError
from appliance.isolation import report
from appliance.policy.apply import journal
from appliance.policy.apply.enforcement import Enforcement
from appliance.policy.apply.engine import ApplyResult
from appliance.policy.plan import document, planner
from appliance.policy.plan.planner import PlanOptions
from appliance.policy.plan.state import MirrorCols, PoliceCols
from appliance.services import mirrors, taps
from appliance.switch import counters, inventory, platform
from appliance.switch.sampling import IpfixCols, SflowCols
from tests import jsonschemas
from tests.unit.policy.test_policy_export import CHANGES, add_mirror, lab_state
from tests.unit.switch_rows import lab_switch

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "unit" / "data"

POLICY = (
    "vifs:\n  - vm: VM1\n    vlan: {mode: access, tag: 7}\n    ingress: {rate: 10240, burst: 1024, mechanism: tc}\n"
)


def rename(doc: dict[str, Any], old: str, new: str, factor: float = 1) -> dict[str, Any]:
    """``doc`` with key ``old`` renamed to ``new`` (same place), its value divided by ``factor``."""
    return {(new if k == old else k): (v / factor if k == old and isinstance(v, int) else v) for k, v in doc.items()}


# -- the registry and the files ---------------------------------------------------------------


def test_every_document_has_a_valid_schema_naming_its_name_and_version() -> None:
    for doc in documents.ALL:
        schema = json.loads(doc.schema_path.read_text())
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["properties"]["schema"] == {"const": doc.name}
        assert schema["properties"]["version"] == {"const": doc.version}
    shipped = sorted(p.name for p in documents.SCHEMA_DIR.glob("*.json"))
    assert shipped == sorted(d.file for d in documents.ALL)  # no file without a document, nor the reverse


def test_the_reference_page_lists_every_document_and_the_schema_files_ship_in_the_package() -> None:
    page = (ROOT / "docs" / "reference" / "json.md").read_text()
    for doc in documents.ALL:
        assert f"`{doc.name}`" in page and doc.file in page
    assert '"schemas/*.json"' in (ROOT / "pyproject.toml").read_text()


def test_a_key_in_the_old_unit_style_breaks_every_schema() -> None:
    """Each document refuses a ``_kbps`` or ``_kbit`` key anywhere its schema describes (the rule, not a list)."""
    assert jsonschemas.problems(documents.AUDIT_LINE, {"schema": "hvnet.audit", "rate_kbps": 1})
    for doc in documents.ALL:
        assert "_(kbps|kbit" in doc.schema_path.read_text()


# -- status --------------------------------------------------------------------------------


def status_doc() -> dict[str, Any]:
    inv = inventory.read(lab_switch().snapshot(), kernel_counters=False)
    inv.vifs[0].rates = counters.Rates(8_000_000.0, 1_000.0, 700.0, 2.0, 1.0)  # as --rates measures them
    sflow = SflowCols(("192.0.2.9:6343",), 100, 10, 256, external_ids=(("hvnet-owner", "hvnet"),))
    ipfix = IpfixCols(("192.0.2.9:4739",), 64, cache_active_timeout=60, cache_max_flows=4096)
    inv.bridges[0].sflow, inv.bridges[0].ipfix = inventory._sampling_json(sflow), inventory._sampling_json(ipfix)
    return inv.to_json(all_ports=True)


def test_status_validates_and_writes_its_limits_in_bits() -> None:
    doc = status_doc()
    jsonschemas.check(documents.STATUS, doc)
    vif = doc["vifs"][0]
    assert (doc["schema"], doc["version"]) == ("hvnet.status", 2)
    # the meter record of lab_switch: 10240 kbit/s, burst 1024 kbit; linux-htb max-rate 10000000 bit/s
    assert (vif["ingress_policing_rate_bits_per_s"], vif["ingress_policing_burst_bits"]) == (10_240_000, 1_024_000)
    assert vif["egress_max_rate_bits_per_s"] == 10_000_000 and isinstance(vif["egress_max_rate_bits_per_s"], int)
    assert vif["rates"]["rx_bits_per_s"] == 8_000_000.0
    sflow, ipfix = doc["bridges"][0]["sflow"], doc["bridges"][0]["ipfix"]
    assert (sflow["polling_s"], sflow["header_bytes"], sflow["owner"], ipfix["cache_active_timeout_s"]) == (
        10, 256, "hvnet", 60)  # fmt: skip


def test_status_says_what_the_host_is() -> None:
    doc = status_doc()
    assert doc["host"]["platform"] is None  # not asked (the status verb fills it from the host's files)
    jsonschemas.check(documents.STATUS, doc)
    where = platform.detect("INSTALLATION_UUID='a'\nCONTROL_DOMAIN_UUID='b'\nPRODUCT_BRAND='XCP-ng'\n", None)
    doc["host"]["platform"] = where.to_json()
    jsonschemas.check(documents.STATUS, doc)
    assert doc["host"]["platform"] == {"product": "XCP-ng", "version": None, "dom0": True, "build": None}
    doc["host"]["platform"]["dom0"] = "yes"
    assert any("dom0" in p for p in jsonschemas.problems(documents.STATUS, doc))


def test_status_with_a_version_1_sampling_key_is_refused() -> None:
    doc = status_doc()
    doc["bridges"][0]["sflow"] = rename(doc["bridges"][0]["sflow"], "polling_s", "polling")
    assert any("polling" in p for p in jsonschemas.problems(documents.STATUS, doc))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("ingress_policing_rate_kbps", "ingress_policing_rate_bits_per_s"),
        ("ingress_policing_burst_kbit", "ingress_policing_burst_bits"),
        ("egress_max_rate_kbps", "egress_max_rate_bits_per_s"),
    ],
)
def test_status_with_a_version_1_key_is_refused(old: str, new: str) -> None:
    doc = status_doc()
    doc["vifs"][0] = rename(doc["vifs"][0], new, old, 1000)
    found = jsonschemas.problems(documents.STATUS, doc)
    assert any(old in p for p in found) and any(new in p for p in found)  # not allowed, and the new one missing


def test_status_without_its_schema_or_of_another_version_is_refused() -> None:
    doc = status_doc()
    assert jsonschemas.problems(documents.STATUS, {**doc, "version": 1})
    assert jsonschemas.problems(documents.STATUS, {k: v for k, v in doc.items() if k != "schema"})


# -- isolation results -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "saved", ["isolation-seed-three-vm.json", "isolation-mirror-exception.json", "isolation-guest-down.json"]
)
def test_a_saved_isolation_result_validates_once_written_by_this_hvnet(saved: str) -> None:
    doc = report.to_json(report.from_json(json.loads((DATA / saved).read_text())))
    jsonschemas.check(documents.ISOLATION_RESULT, doc)
    assert jsonschemas.problems(documents.ISOLATION_RESULT, rename(doc, "duration_s", "duration_ms"))
    broken = copy.deepcopy(doc)
    broken["methods"]["traffic"]["observed"][0]["value"] = "maybe"
    assert jsonschemas.problems(documents.ISOLATION_RESULT, broken)


# -- the audit log, rollback records, plan and apply ----------------------------------------------


def test_audit_lines_validate(tmp_path: Path) -> None:
    j = journal.Journal("unix:/x.sock", tmp_path / "state", tmp_path / "audit.jsonl")
    j.audit("hvnet apply", CHANGES[:4], "ok", plan_id="abc")
    j.audit("hvnet rollback", [CHANGES[2].inverse()], "failed", error="boom")
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    for line in lines:
        jsonschemas.check(documents.AUDIT_LINE, line)
    assert lines[0]["plan_id"] == "abc" and lines[0]["after"][2]["value"]  # described in words
    assert jsonschemas.problems(documents.AUDIT_LINE, rename(lines[0], "time", "when"))


def test_a_rollback_record_validates_and_writes_policing_in_bits() -> None:
    rec = journal.new_record("unix:/x.sock", "hvnet apply p.yaml", CHANGES)
    jsonschemas.check(documents.ROLLBACK_RECORD, json.loads(json.dumps(rec)))
    ingress = next(c for c in rec["changes"] if c["kind"] == "ingress")
    assert ingress["before"] == {"rate_bits_per_s": 1_000_000, "burst_bits": 800_000, "meter_rate_bits_per_s": None,
                                 "meter_burst_bits": None}  # fmt: skip
    assert journal.record_changes(rec) == CHANGES
    old = copy.deepcopy(rec)
    old_ingress = next(c for c in old["changes"] if c["kind"] == "ingress")
    old_ingress["before"] = {"rate_kbps": 1000, "burst_kbit": 800, "meter_rate_kbps": None, "meter_burst_kbit": None}
    assert jsonschemas.problems(documents.ROLLBACK_RECORD, old)


def test_a_version_1_rollback_record_still_reads() -> None:
    """A pending record as an hvnet before version 2 wrote it (no schema key, kbit keys): commit and rollback read it."""
    v1 = {"kind": "ingress", "bridge": "xenbr0", "name": "vif1.0", "vm": None, "note": "",
          "before": {"rate_kbps": 0, "burst_kbit": 0, "meter_rate_kbps": 10240, "meter_burst_kbit": 1024},
          "after": {"rate_kbps": 10240, "burst_kbit": 1024, "meter_rate_kbps": None, "meter_burst_kbit": None}}  # fmt: skip
    [change] = journal.record_changes({"changes": [v1]})
    assert (change.before, change.after) == (PoliceCols(0, 0, 10240, 1024), PoliceCols(10240, 1024))
    assert journal.change_from_json(journal.change_to_json(change)) == change


def test_a_rollback_value_that_is_no_whole_kbit_is_refused() -> None:
    bad = {"rate_bits_per_s": 1500, "burst_bits": 0, "meter_rate_bits_per_s": None, "meter_burst_bits": None}
    with pytest.raises(ValueError, match="rate_bits_per_s: 1500"):
        journal.value_from_json("ingress", bad)


def test_plan_and_apply_output_validate() -> None:
    plan = planner.plan(document.parse(POLICY, "p.yaml"), lab_state(), PlanOptions())
    assert sorted(c.kind for c in plan.changes) == ["ingress", "vlan"]
    out = json.loads(json.dumps(plan_json(plan)))  # as --json prints it
    jsonschemas.check(documents.POLICY_PLAN, out)
    ingress = next(c for c in out["changes"] if c["kind"] == "ingress")
    assert (ingress["after"]["rate_bits_per_s"], ingress["after"]["burst_bits"]) == (10_240_000, 1_024_000)
    enforced = [Enforcement("vif1.0", "ingress", "meter", True, "meter 3: 10240 kbit/s burst 1024 kbit installed")]
    applied = ApplyResult(plan, "applied", attempts=1, enforcement=enforced, record_id="3b3888e3836f").to_json()
    applied = json.loads(json.dumps(applied))
    jsonschemas.check(documents.POLICY_APPLY, applied)
    ingress["after"] = {k.replace("bits_per_s", "kbps"): v for k, v in ingress["after"].items()}
    assert jsonschemas.problems(documents.POLICY_PLAN, out)


# -- listings ----------------------------------------------------------------------------------


class _Engine:
    """What the listings ask of the policy engine: the switch as planned against, and the host."""

    def __init__(self, state: Any) -> None:
        self.state, self.host = state, None

    def snapshot(self) -> Any:
        return self.state


def test_the_mirror_list_validates() -> None:
    state = lab_state()
    add_mirror(state, "span1", MirrorCols(src=("vif1.0",), dst=("vif1.0",), output_port="eth1"))
    state.mirrors[("xenbr0", "span1")].statistics = {"tx_packets": 12, "tx_bytes": 1500}
    listed = mirrors.list_mirrors(_Engine(state))  # type: ignore[arg-type]
    doc = documents.MIRROR_LIST.stamp({"mirrors": listed})
    jsonschemas.check(documents.MIRROR_LIST, doc)
    assert listed[0]["tx_bytes"] == 1500
    listed[0] = rename(listed[0], "tx_bytes", "tx_kbit")
    assert jsonschemas.problems(documents.MIRROR_LIST, doc)


def test_the_tap_list_validates() -> None:
    from tests.unit.policy.test_policy_taps import ICMP_TAP, parse
    from tests.unit.policy.test_policy_taps import lab_state as tap_state

    [change] = planner.plan(parse(ICMP_TAP), tap_state()).changes
    row = taps.TapRow("xenbr0", "t1", change.after, 42, 4200)
    doc = documents.TAP_LIST.stamp({"taps": [row.to_json()]})
    jsonschemas.check(documents.TAP_LIST, doc)
    doc["taps"][0]["bytes"] = "4200"
    assert jsonschemas.problems(documents.TAP_LIST, doc)


# -- an OVN pool (snapshots of the lab pool's NB and SB) -----------------------------------------


def test_the_pool_status_validates_and_writes_its_limits_in_bits() -> None:
    from tests.unit.ovn.test_ovn_plan import _view

    doc = _view().to_json()
    jsonschemas.check(documents.POOL_STATUS, doc)
    ports = {p["vm"]: p for s in doc["switches"] for p in s["ports"]}
    assert (ports["VM2"]["qos_max_rate_bits_per_s"], ports["VM2"]["qos_burst_bits"]) == (20_000_000, 2_000_000)
    rule = doc["switches"][0]["qos"][0]
    assert (rule["rate_bits_per_s"], rule["burst_bits"]) == (10_000_000, 1_000_000)  # the NB's 10000 kbit/s, 1000 kbit
    doc["switches"][0]["qos"][0] = rename(rule, "rate_bits_per_s", "rate_kbps", 1000)
    assert any("rate_kbps" in p for p in jsonschemas.problems(documents.POOL_STATUS, doc))


def test_a_pool_outcome_validates_and_writes_its_limits_in_bits() -> None:
    from appliance.cli.pool import outcome_json
    from appliance.ovn import plan as ovn_plan
    from appliance.ovn.write import Acks
    from appliance.services.ovn.mirrors import Mirrored
    from appliance.services.ovn.pool import Enforced, PoolOutcome
    from tests.unit.ovn.test_ovn_plan import _policy, _view

    view = _view()
    plan = ovn_plan.plan(view, _policy("version: 1\nvifs:\n  - vm: VM1\n    ingress: {rate: 10000, burst: 1000}\n"))
    (lim,) = plan.add
    out = PoolOutcome(view, plan, nb_cfg=5, acks=Acks(5, 0.4213), enforced=[Enforced(lim, "hv1", "enforced", "")],
                      mirrored=[Mirrored("span", lim.port, "VM1", "hv1", "present")])  # fmt: skip
    doc = outcome_json(out)
    jsonschemas.check(documents.POOL_OUTCOME, doc)
    assert (doc["enforced"][0]["rate_bits_per_s"], doc["enforced"][0]["burst_bits"]) == (10_000_000, 1_000_000)
    assert doc["acknowledged_s"] == 0.421 and doc["changes"]
    doc["enforced"][0] = rename(doc["enforced"][0], "burst_bits", "burst_kbit", 1000)
    assert any("burst_kbit" in p for p in jsonschemas.problems(documents.POOL_OUTCOME, doc))


SAMPLING_POLICY = """\
version: 1
bridges:
  xenbr0:
    sflow: {targets: ["192.0.2.9:6343"], sampling: 64, polling: 10, header: 128}
    ipfix: {targets: ["192.0.2.9:4739"], sampling: 400, obs_domain_id: 1, obs_point_id: 1,
            cache_active_timeout: 60, cache_max_flows: 1000}
"""


def test_sampling_changes_write_durations_and_sizes_with_their_unit_and_read_back() -> None:
    plan = planner.plan(document.parse(SAMPLING_POLICY, "p.yaml"), lab_state(), PlanOptions())
    out = json.loads(json.dumps(plan_json(plan)))  # as --json prints it (tuples are lists there)
    jsonschemas.check(documents.POLICY_PLAN, out)
    after = {c["kind"]: c["after"] for c in out["changes"]}
    assert (after["sflow"]["polling_s"], after["sflow"]["header_bytes"]) == (10, 128)
    assert after["ipfix"]["cache_active_timeout_s"] == 60
    rec = journal.new_record("unix:/x.sock", "hvnet apply p.yaml", plan.changes)
    jsonschemas.check(documents.ROLLBACK_RECORD, json.loads(json.dumps(rec)))
    assert journal.record_changes(json.loads(json.dumps(rec))) == plan.changes
    # as version 1 wrote them: the columns' own names
    v1 = [{**c, "after": {{"polling_s": "polling", "header_bytes": "header"}.get(k, k): v for k, v in c["after"].items()}}
          for c in rec["changes"]]  # fmt: skip
    assert journal.record_changes({"changes": v1}) == plan.changes
    assert jsonschemas.problems(documents.ROLLBACK_RECORD, {**rec, "changes": v1})


# -- the read verbs of limits and sampling (the lab switch's rows, as test_limits_view reads them) ----------------


def test_qos_show_and_vif_show_validate_with_limits_in_bits() -> None:
    from appliance.cli import limits as cli_limits
    from appliance.services import limits
    from tests.unit.services.test_limits_view import _inventory

    inv = _inventory()
    doc = json.loads(json.dumps(cli_limits.qos_json(limits.qos_view(inv))))  # as --json prints it
    jsonschemas.check(documents.QOS_SHOW, doc)
    assert [v["ingress"] and v["ingress"]["rate_bits_per_s"] for v in doc["vifs"]] == [10_240_000, None]
    vif, lim = limits.vif_view(inv, "vif1.0")
    shown = json.loads(json.dumps(cli_limits.vif_json(vif, lim)))
    jsonschemas.check(documents.VIF_SHOW, shown)
    assert shown["vif"]["egress"]["burst_bits"] == 1_000_000
    doc["vifs"][0]["ingress"] = rename(doc["vifs"][0]["ingress"], "rate_bits_per_s", "rate_kbps", 1000)
    assert any("rate_kbps" in p for p in jsonschemas.problems(documents.QOS_SHOW, doc))
    shown["vif"]["egress"]["rate_bits_per_s"] = "10 Mbit/s"
    assert jsonschemas.problems(documents.VIF_SHOW, shown)


def test_sflow_and_ipfix_show_validate() -> None:
    from appliance.cli import limits as cli_limits
    from appliance.services import limits
    from tests.unit.services.test_limits_view import _inventory, _sampled

    for inv in (_inventory(_sampled()), _inventory()):  # configured, and none
        for kind, doc_kind in (("sflow", documents.SFLOW_SHOW), ("ipfix", documents.IPFIX_SHOW)):
            doc = json.loads(json.dumps(cli_limits.sampling_json(kind, limits.sampling_view(inv, kind))))
            jsonschemas.check(doc_kind, doc)
            assert doc["schema"] == doc_kind.name
    sflow = cli_limits.sampling_json("sflow", limits.sampling_view(_inventory(_sampled()), "sflow"))
    assert sflow["bridges"][0]["settings"]["sampling"] == 64
    sflow["bridges"][0]["settings"] = rename(sflow["bridges"][0]["settings"], "polling_s", "polling")
    assert any("polling" in p for p in jsonschemas.problems(documents.SFLOW_SHOW, sflow))
    assert jsonschemas.problems(documents.IPFIX_SHOW, {**sflow, "schema": "hvnet.ipfix.show"})  # not the other kind


# -- verify, commit ---------------------------------------------------------------------------------


class _Verifier:
    """What ``verify`` asks of the policy engine: a plan against the lab's switch, and whether meters drifted."""

    def plan(self, policy: Any) -> Any:
        return planner.plan(policy, lab_state(), PlanOptions())

    def openflow_drift(self) -> bool:
        return True


def test_verify_validates_and_lists_each_drifted_setting_in_words() -> None:
    from appliance.cli.policy import drift_json
    from appliance.services import policy as svc

    found = svc.verify(_Verifier(), document.parse(POLICY, "p.yaml"))  # type: ignore[arg-type]
    doc = json.loads(json.dumps(drift_json(found)))
    jsonschemas.check(documents.POLICY_VERIFY, doc)
    assert doc["in_sync"] is False and sorted(d["setting"] for d in doc["drift"]) == ["ingress", "meters", "vlan"]
    in_sync = drift_json(svc.Drift())
    jsonschemas.check(documents.POLICY_VERIFY, in_sync)
    assert in_sync["in_sync"] is True
    doc["drift"][0]["found"] = None
    assert jsonschemas.problems(documents.POLICY_VERIFY, doc)


def test_commit_validates_with_and_without_a_pending_change() -> None:
    from appliance.cli.policy import commit_json
    from appliance.services.confirm import Pending

    kept = commit_json(Pending("3b3888e3836f", deadline=1_800_000_000.0, changes=2, watcher_pid=4242))
    jsonschemas.check(documents.POLICY_COMMIT, kept)
    assert (kept["committed"], kept["id"], kept["changes"]) == (True, "3b3888e3836f", 2)
    none = commit_json(None)
    jsonschemas.check(documents.POLICY_COMMIT, none)
    assert none["committed"] is False and none["id"] is None
    assert jsonschemas.problems(documents.POLICY_COMMIT, {**kept, "changes": "2"})


# -- export: a policy file as JSON -------------------------------------------------------------------


def test_export_validates_and_reads_back_as_a_policy_that_plans_nothing() -> None:
    from appliance.policy.plan import export
    from appliance.switch.sampling import SflowCols

    state = lab_state()
    add_mirror(state, "span1", MirrorCols(src=("vif1.0",), dst=("vif1.0",), output_port="eth1"))
    state.bridges["xenbr0"].sflow = SflowCols(("192.0.2.9:6343",), 64, 10, 128)
    doc = json.loads(json.dumps(documents.POLICY.stamp(export.to_policy(state))))  # as export --json prints it
    jsonschemas.check(documents.POLICY, doc)
    assert list(doc)[:2] == ["schema", "version"] and doc["bridges"]["xenbr0"]["sflow"]["polling"] == 10
    policy = document.parse(json.dumps(doc), "export.json")  # JSON is YAML: apply reads it back
    assert planner.plan(policy, state, PlanOptions()).changes == []
    with pytest.raises(ConfigError, match=r"'hvnet\.status' is not a policy"):
        document.parse(json.dumps({**doc, "schema": "hvnet.status"}), "status.json")
    doc["vifs"][0]["ingress"] = {"rate_kbps": 1000}
    assert any("rate_kbps" in p for p in jsonschemas.problems(documents.POLICY, doc))


def test_a_pools_export_validates() -> None:
    from appliance.ovn import export
    from tests.unit.ovn.test_ovn_plan import _applied

    for by in ("mac", "port"):
        doc = json.loads(json.dumps(documents.POLICY.stamp(export.to_policy(_applied(), by=by))))
        jsonschemas.check(documents.POLICY, doc)
    doc["bridges"]["br-int"]["mirrors"]["span2"]["select"] = 7
    assert jsonschemas.problems(documents.POLICY, doc)
