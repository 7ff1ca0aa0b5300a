"""The host's own undo of a --no-commit apply, planned from journal records (pure), and the reading of what the
host's timer left behind (captured outputs of its probe and of ovsdb-client)."""

from __future__ import annotations

import json

import pytest

from appliance.core.errors import HvnetError
from appliance.policy.apply import journal
from appliance.policy.plan import hostundo
from appliance.services import deadman

# A pending record as 'hvnet --host hv2 apply p.yaml --no-commit' wrote it in the two-hosts lab.
RECORD = json.loads(
    '{"id": "3b3888e3836f", "time": "2026-11-27T02:02:22.484+00:00", "user": "root", "command": "hvnet --host '
    'hv2 apply p.yaml --no-commit --timeout 5", "target": "ssh:hv2:/run/hosts/hv2/run/db.sock", "changes": '
    '[{"kind": "vlan", "bridge": "xenbr0", "name": "vif2.0", "vm": "VM2", "note": "", "before": {"vlan_mode": '
    'null, "tag": 1, "trunks": []}, "after": {"vlan_mode": "access", "tag": 9, "trunks": []}}]}'
)
# Ingress and protocols changes as the journal serialises them (change_to_json).
INGRESS = {"kind": "ingress", "bridge": "xenbr0", "name": "vif1.0", "vm": None, "note": "",
           "before": {"rate_kbps": 0, "burst_kbit": 0, "meter_rate_kbps": 10240, "meter_burst_kbit": 1024},
           "after": {"rate_kbps": 10240, "burst_kbit": 1024, "meter_rate_kbps": None, "meter_burst_kbit": None}}  # fmt: skip
PROTOCOLS = {"kind": "protocols", "bridge": "xenbr0", "name": "xenbr0", "vm": None, "note": "",
             "before": ["OpenFlow10"], "after": ["OpenFlow10", "OpenFlow13"]}  # fmt: skip
MIRROR = {"kind": "mirror", "bridge": "xenbr0", "name": "span1", "vm": None, "note": "", "before": None,
          "after": {"select_all": True, "src": [], "dst": [], "vlans": [], "output_port": "vif3.0",
                    "output_vlan": None, "snaplen": None, "filter": None, "external_ids": [], "tunnel": None}}  # fmt: skip


def test_a_vlan_change_is_undone_by_name_guarded_on_its_post_change_values() -> None:
    undo = hostundo.plan(journal.record_changes(RECORD), "undo 3b3888e3836f")
    assert not undo.skipped and len(undo.covered) == 1
    (txn,) = undo.transactions
    assert txn[0] == "Open_vSwitch" and txn[1] == {"op": "comment", "comment": "undo 3b3888e3836f"}
    assert txn[2] == {"op": "wait", "table": "Port", "timeout": 0, "until": "==", "columns": ["name"],
                      "rows": [{"name": "vif2.0"}],
                      "where": [["name", "==", "vif2.0"], ["vlan_mode", "==", "access"], ["tag", "==", 9],
                                ["trunks", "==", ["set", []]]]}  # fmt: skip
    # only what changed is written back, an unset column as the empty set
    assert txn[3] == {"op": "update", "table": "Port", "where": [["name", "==", "vif2.0"]],
                      "row": {"vlan_mode": ["set", []], "tag": 1}}  # fmt: skip
    assert json.loads(undo.texts()[0]) == txn


def test_ingress_and_protocols_are_undone_and_newest_first_with_every_guard_before_any_write() -> None:
    changes = journal.record_changes({"changes": [PROTOCOLS, INGRESS]})
    (txn,) = hostundo.plan(changes, "x").transactions
    ops = [(op["op"], op["table"]) for op in txn[2:]]
    assert ops == [("wait", "Interface"), ("wait", "Bridge"), ("update", "Interface"), ("mutate", "Interface"),
                   ("update", "Bridge")]  # fmt: skip
    assert txn[2]["where"][1:] == [["ingress_policing_rate", "==", 10240], ["ingress_policing_burst", "==", 1024]]
    assert txn[4]["row"] == {"ingress_policing_rate": 0, "ingress_policing_burst": 0}
    assert txn[5]["mutations"] == [
        ["external_ids", "delete", ["set", ["hvnet-police-rate-kbps", "hvnet-police-burst-kbit"]]],
        ["external_ids", "insert", ["map", [["hvnet-police-burst-kbit", "1024"], ["hvnet-police-rate-kbps", "10240"]]]],
    ]  # fmt: skip
    assert txn[3]["where"][1] == ["protocols", "==", ["set", ["OpenFlow10", "OpenFlow13"]]]
    assert txn[6]["row"] == {"protocols": ["set", ["OpenFlow10"]]}


def test_what_the_host_cannot_name_is_left_out_and_said() -> None:
    undo = hostundo.plan(journal.record_changes({"changes": [MIRROR, *RECORD["changes"]]}), "x")
    assert [c.kind for c in undo.covered] == ["vlan"]
    assert [(c.kind, why) for c, why in undo.skipped] == [
        ("mirror", "mirror is not in the host's own undo (its rows are named by UUID)")]  # fmt: skip
    assert hostundo.plan(journal.record_changes({"changes": [MIRROR]}), "x").transactions == []


def test_a_large_change_is_split_into_transactions_each_under_one_arguments_limit() -> None:
    one = RECORD["changes"][0]
    many = [{**one, "name": f"vif{i}.0"} for i in range(2000)]
    undo = hostundo.plan(journal.record_changes({"changes": many}), "x")
    assert len(undo.transactions) > 1 and len(undo.covered) == 2000
    assert all(len(t) <= hostundo.MAX_CHUNK_BYTES for t in undo.texts())
    # each transaction guards exactly the rows it writes
    for txn in undo.transactions:
        waits = [op["where"][0][2] for op in txn if isinstance(op, dict) and op.get("op") == "wait"]
        writes = [op["where"][0][2] for op in txn if isinstance(op, dict) and op.get("op") == "update"]
        assert waits == writes


# Captured: the timer's directory read by deadman.PROBE, with ovsdb-client's own answers inside.
FIRED_OK = 'token fired\nstatus 0\nresult [{},{},{"count":1}]\n'
FIRED_GUARD = (
    'token fired\nstatus 0\nresult [{},{"details":"\\"where\\" clause test failed","error":"timed out"},null]\n'
)
FIRED_NO_DB = ('token fired\nstatus 1\nerror ovsdb-client: failed to connect to "unix:/nonexistent/db.sock" '
               "(No such file or directory)\n")  # fmt: skip


@pytest.mark.parametrize(
    "text, verdict",
    [
        (FIRED_OK, "rolled back"),
        (FIRED_GUARD, "guard failed"),
        (FIRED_NO_DB, "failed"),
        ("token fired\n", "running"),
        ("token armed\n", "waiting"),
        ("token committed\n", "committed"),
        ("gone\n", "gone"),
    ],
)
def test_what_the_host_did_is_read_from_its_timers_directory(text: str, verdict: str) -> None:
    assert deadman.parse_probe(text).verdict == verdict


def test_the_audit_line_carries_ovsdb_clients_complaint() -> None:
    assert deadman.parse_probe(FIRED_GUARD).detail() == 'timed out: "where" clause test failed'
    assert "failed to connect" in deadman.parse_probe(FIRED_NO_DB).detail()


@pytest.mark.parametrize("path", ["/", "/var/lib/hvnet", "/var/lib/hvnet/no-commit/../../etc",
                                  "/var/lib/hvnet/no-commit/0123456789abcdeF", "/x/0123456789abcdef"])  # fmt: skip
def test_only_a_directory_hvnet_named_is_ever_claimed_or_removed(path: str) -> None:
    timer = deadman.Timer(path, 5, 0.0, 1)
    with pytest.raises(HvnetError, match="not an hvnet timer directory"):
        deadman.remove(None, timer)  # type: ignore[arg-type]  # refused before the host is used
