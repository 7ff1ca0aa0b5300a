"""Every JSON document hvnet prints or stores, by name and version: the contract other tools read.

Each document starts with ``"schema"`` (its name) and ``"version"`` (an integer),
as suite results always have, and is described by a JSON Schema (draft 2020-12)
shipped in ``appliance/schemas/`` and published in ``docs/reference/json.md``.

The one unit rule for keys: the unit is the key's suffix, spelled out --
``_bits_per_s`` for rates, ``_bits`` for burst sizes, ``_bytes``, ``_packets``,
``_s`` for durations, ``_pct`` for percentages.  A version changes when a key is
renamed or its unit changes (never when a key is added); a stored document of
an older version keeps loading, upgraded by its reader.  The modules that write
a document take its name and version from here, so the registry, the schema
files and the writers cannot drift apart unnoticed (``tests/unit/core/
test_documents.py`` checks the real outputs against the files).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"


@dataclass(frozen=True)
class Document:
    """One kind of JSON document: its name, current version, schema file and who writes it."""

    name: str
    version: int
    file: str  # under appliance/schemas/
    written_by: str

    @property
    def schema_path(self) -> Path:
        return SCHEMA_DIR / self.file

    def stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with the document's name and version first (where a reader looks for them)."""
        return {"schema": self.name, "version": self.version, **body}


STATUS = Document("hvnet.status", 2, "status.schema.json", "hvnet status --json (each host's under --hosts)")
SUITE_RESULTS = Document(
    "hvnet.netperf.results",
    2,
    "netperf-results.schema.json",
    "a suite run's results.json; hvnet suite report RUN --json",
)
SUITE_RUN = Document("hvnet.suite.run", 1, "suite-run.schema.json", "hvnet suite run --json (the run's directory)")
SUITE_LIST = Document("hvnet.suite.list", 2, "suite-list.schema.json", "hvnet suite list --json")
SUITE_VALIDATE = Document("hvnet.suite.validate", 1, "suite-validate.schema.json", "hvnet suite validate FILE --json")
SUITE_COMPARE = Document("hvnet.suite.compare", 1, "suite-compare.schema.json", "hvnet suite compare BASE NEW --json")
SUITE_AGAINST = Document(
    "hvnet.suite.against", 1, "suite-against.schema.json", "hvnet suite report RUN --against STUDY --json"
)
SUITE_PRUNE = Document("hvnet.suite.prune", 1, "suite-prune.schema.json", "hvnet suite prune --json")
SUITE_PIN = Document("hvnet.suite.pin", 1, "suite-pin.schema.json", "hvnet suite pin RUN --json")
SUITE_UNPIN = Document("hvnet.suite.unpin", 1, "suite-unpin.schema.json", "hvnet suite unpin RUN --json")
ISOLATION_RESULT = Document(
    "hvnet.isolation.result", 1, "isolation-result.schema.json",
    "hvnet isolation check --json, hvnet isolation audit --json; read back by hvnet isolation report",
)  # fmt: skip
AUDIT_LINE = Document("hvnet.audit", 1, "audit-line.schema.json", "each line of the audit log (audit.jsonl)")
ROLLBACK_RECORD = Document(
    "hvnet.rollback", 2, "rollback-record.schema.json",
    "the rollback records last-apply.json and pending.json under the state directory",
)  # fmt: skip
POLICY_PLAN = Document("hvnet.policy.plan", 2, "policy-plan.schema.json", "hvnet plan --json")
POLICY_APPLY = Document(
    "hvnet.policy.apply", 2, "policy-apply.schema.json",
    "hvnet apply --json, and the --json of rollback and of the verbs that change one setting (vif set, qos set, "
    "mirror add, tap add, sflow set, ...)",
)  # fmt: skip
POLICY = Document(
    "hvnet.policy", 1, "policy.schema.json",
    "hvnet export --json (of a switch, or of a pool with --pool): a policy file, read back by plan and apply",
)  # fmt: skip
POLICY_VERIFY = Document("hvnet.policy.verify", 1, "policy-verify.schema.json", "hvnet verify --json")
POLICY_COMMIT = Document("hvnet.policy.commit", 1, "policy-commit.schema.json", "hvnet commit --json")
POOL_STATUS = Document("hvnet.pool.status", 2, "pool-status.schema.json", "hvnet status --pool NAME --json")
POOL_OUTCOME = Document(
    "hvnet.pool.outcome", 2, "pool-outcome.schema.json", "hvnet plan|apply|verify|rollback --pool NAME --json"
)
MIRROR_LIST = Document("hvnet.mirror.list", 1, "mirror-list.schema.json", "hvnet mirror list --json")
TAP_LIST = Document("hvnet.tap.list", 1, "tap-list.schema.json", "hvnet tap list --json")
QOS_SHOW = Document("hvnet.qos.show", 1, "qos-show.schema.json", "hvnet qos show [VIF] --json")
VIF_SHOW = Document("hvnet.vif.show", 1, "vif-show.schema.json", "hvnet vif show VIF --json")
SFLOW_SHOW = Document("hvnet.sflow.show", 1, "sflow-show.schema.json", "hvnet sflow show [BRIDGE] --json")
IPFIX_SHOW = Document("hvnet.ipfix.show", 1, "ipfix-show.schema.json", "hvnet ipfix show [BRIDGE] --json")
CAPTURE = Document(
    "hvnet.capture", 2, "capture.schema.json",
    "a capture's record capture.json; hvnet capture start --json",
)  # fmt: skip
CAPTURE_SHOW = Document(
    "hvnet.capture.show", 2, "capture-show.schema.json", "hvnet capture show NAME --json, hvnet capture stop --json"
)
CAPTURE_LIST = Document("hvnet.capture.list", 2, "capture-list.schema.json", "hvnet capture list --json")
CAPTURE_DELETE = Document("hvnet.capture.delete", 1, "capture-delete.schema.json", "hvnet capture delete NAME --json")
CAPTURE_FETCH = Document("hvnet.capture.fetch", 1, "capture-fetch.schema.json", "hvnet capture fetch NAME --json")
FLEET = Document(
    "hvnet.fleet", 2, "fleet.schema.json",
    "VERB --hosts ... --json (status, plan, apply, verify): each host's exit, time and document",
)  # fmt: skip
HOSTS = Document("hvnet.hosts", 2, "hosts.schema.json", "hvnet hosts --json")
CONFIG = Document("hvnet.config", 1, "config.schema.json", "hvnet config show --json")
PROBES_LIST = Document("hvnet.probes.list", 1, "probes-list.schema.json", "hvnet probes list --json")
PROBES_CLEAN = Document("hvnet.probes.clean", 1, "probes-clean.schema.json", "hvnet probes clean --json")
LAB_STATUS = Document("hvnet.lab.status", 1, "lab-status.schema.json", "hvnet lab status --json")
LAB_UP = Document("hvnet.lab.up", 1, "lab-up.schema.json", "hvnet lab up --json")
LAB_DOWN = Document("hvnet.lab.down", 1, "lab-down.schema.json", "hvnet lab down --json")
LAB_IMAGE = Document("hvnet.lab.image", 2, "lab-image.schema.json", "hvnet lab image --json")

ALL = (
    STATUS, SUITE_RESULTS, ISOLATION_RESULT, AUDIT_LINE, ROLLBACK_RECORD, POLICY_PLAN, POLICY_APPLY, POOL_STATUS,
    POOL_OUTCOME, MIRROR_LIST, TAP_LIST, QOS_SHOW, VIF_SHOW, SFLOW_SHOW, IPFIX_SHOW,
    CAPTURE, CAPTURE_SHOW, CAPTURE_LIST, CAPTURE_DELETE, CAPTURE_FETCH, POLICY_VERIFY, POLICY_COMMIT, POLICY,
    SUITE_RUN, SUITE_LIST, SUITE_VALIDATE, SUITE_COMPARE, SUITE_AGAINST, SUITE_PRUNE, SUITE_PIN, SUITE_UNPIN,
    FLEET, HOSTS, CONFIG, PROBES_LIST, PROBES_CLEAN, LAB_STATUS, LAB_UP, LAB_DOWN, LAB_IMAGE,
)  # fmt: skip

# Every verb whose --json prints a document, and the documents it may print (one per mode: a switch's, a
# pool's).  tests/unit/cli/test_json_contract.py walks the parser: a verb with --json missing here fails it.
_CHANGE = (POLICY_APPLY,)  # the verbs that change one setting answer as apply does
BY_VERB: dict[str, tuple[Document, ...]] = {
    "status": (STATUS, POOL_STATUS, FLEET),
    "plan": (POLICY_PLAN, POOL_OUTCOME, FLEET),
    "apply": (POLICY_APPLY, POOL_OUTCOME, FLEET),
    "rollback": (POLICY_APPLY, POOL_OUTCOME),
    "verify": (POLICY_VERIFY, POOL_OUTCOME, FLEET),
    "commit": (POLICY_COMMIT,),
    "hosts": (HOSTS,),
    "config show": (CONFIG,),
    "probes list": (PROBES_LIST,),
    "probes clean": (PROBES_CLEAN,),
    "lab status": (LAB_STATUS,),
    "lab up": (LAB_UP,),
    "lab down": (LAB_DOWN,),
    "lab image": (LAB_IMAGE,),
    "export": (POLICY,),
    "isolation check": (ISOLATION_RESULT,),
    "isolation audit": (ISOLATION_RESULT,),
    "isolation report": (ISOLATION_RESULT,),
    "suite report": (SUITE_RESULTS, SUITE_AGAINST),
    "suite run": (SUITE_RUN,),
    "suite list": (SUITE_LIST,),
    "suite validate": (SUITE_VALIDATE,),
    "suite compare": (SUITE_COMPARE,),
    "suite prune": (SUITE_PRUNE,),
    "suite pin": (SUITE_PIN,),
    "suite unpin": (SUITE_UNPIN,),
    "mirror list": (MIRROR_LIST,),
    "tap list": (TAP_LIST,),
    "qos show": (QOS_SHOW,),
    "vif show": (VIF_SHOW,),
    "sflow show": (SFLOW_SHOW,),
    "ipfix show": (IPFIX_SHOW,),
    "capture start": (CAPTURE,),
    "capture show": (CAPTURE_SHOW,),
    "capture stop": (CAPTURE_SHOW,),
    "capture list": (CAPTURE_LIST,),
    "capture delete": (CAPTURE_DELETE,),
    "capture fetch": (CAPTURE_FETCH,),
    **{verb: _CHANGE for verb in ("vif set", "qos set", "qos clear", "mirror add", "mirror del", "tap add", "tap del",
                                   "sflow set", "sflow clear", "ipfix set", "ipfix clear")},
}  # fmt: skip
