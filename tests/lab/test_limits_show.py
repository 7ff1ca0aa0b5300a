"""The read verbs of limits and sampling on the built-in lab, ovs-vsctl as the witness: ``qos set`` with
explicit units read back by ``qos show`` and ``vif show`` (in xe's and libvirt's units too), the ambiguous
``kbps`` refused as JSON under ``--json`` with nothing changed, and ``sflow show`` / ``ipfix show``."""

from __future__ import annotations

import json
import subprocess

import pytest

from appliance.core import documents
from appliance.lab import Lab
from tests import jsonschemas
from tests.conftest import run_hvnet
from tests.lab.policy_helpers import reset, vsctl

TAGS = {"vif1.0": 1, "vif2.0": 1, "vif3.0": 2}


@pytest.fixture(autouse=True)
def clean(lab: Lab):
    reset(lab, TAGS)
    vsctl(lab, "clear", "bridge", "xenbr0", "sflow", "ipfix")
    yield
    reset(lab, TAGS)
    vsctl(lab, "clear", "bridge", "xenbr0", "sflow", "ipfix")


def hv(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    res = run_hvnet(*args, timeout=timeout)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def test_qos_set_with_units_reads_back_in_bits_and_in_other_tools_units(lab: Lab) -> None:
    res = hv("qos", "set", "vif2.0", "--ingress-rate", "1250KB/s", "--ingress-burst", "125KB",
             "--egress-rate", "20mbit", "--egress-burst", "1MiB", "--mechanism", "meter")  # fmt: skip
    # a meter: the lab's userspace datapath enforces it (tc police needs the kernel datapath)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "note: --egress-burst 1MiB is 8388.61 kbit; OVS takes whole kbit: 8389 kbit" in res.stderr
    assert "vif2.0 ingress: enforced by meter" in res.stdout, res.stdout

    shown = hv("qos", "show", "vif2.0", "--json")
    assert shown.returncode == 0, shown.stderr
    jsonschemas.check(documents.QOS_SHOW, json.loads(shown.stdout))
    (vif,) = json.loads(shown.stdout)["vifs"]
    assert vif["port"] == "vif2.0" and vif["vm"] == "VM2"
    assert vif["ingress"] == {"rate_bits_per_s": 10_000_000, "burst_bits": 1_000_000, "burst_is_ovs_default": False,
                              "mechanism": "meter"}  # fmt: skip
    queue = vsctl(lab, "--columns=_uuid", "--bare", "list", "queue")
    queue_burst = int(vsctl(lab, "get", "queue", queue, "other_config:burst").strip('"'))
    assert vif["egress"] == {"qos_type": "linux-htb", "rate_bits_per_s": 20_000_000, "burst_bits": queue_burst}
    assert vif["equivalents"]["xe"]["qos_algorithm_params:kbps"] == 1250

    everyone = hv("qos", "show").stdout
    assert (
        "vif2.0" in everyone and "10000 kbit/s burst 1000 kbit (meter)" in everyone and "max 20000 kbit/s" in everyone
    )

    jsonschemas.check(documents.VIF_SHOW, json.loads(hv("vif", "show", "vm:VM2", "--json").stdout))
    text = hv("vif", "show", "vm:VM2").stdout
    assert "qos_algorithm_params:kbps=1250 (kilobytes/s" in text
    assert "<bandwidth><outbound average='1250' burst='~122'/>" in text
    assert "<bandwidth><inbound average='2500'" in text

    assert hv("qos", "clear", "vif2.0").returncode == 0
    (cleared,) = json.loads(hv("qos", "show", "vif2.0", "--json").stdout)["vifs"]
    assert cleared["ingress"] is None and cleared["egress"] is None and cleared["equivalents"]["xe"] is None


def test_kbps_is_refused_as_json_and_changes_nothing(lab: Lab) -> None:
    res = hv("qos", "set", "vif2.0", "--ingress-rate", "10kbps", "--json")
    assert res.returncode == 2 and res.stdout == ""
    (problem,) = json.loads(res.stderr)["error"]["problems"]
    assert problem["field"] == "--ingress-rate" and "ambiguous" in problem["message"]
    assert vsctl(lab, "get", "interface", "vif2.0", "ingress_policing_rate") == "0"
    assert vsctl(lab, "list", "qos") == ""


def test_sflow_and_ipfix_show(lab: Lab) -> None:
    assert hv("sflow", "set", "xenbr0", "--target", "192.0.2.9:6343", "--sampling", "64").returncode == 0
    doc = json.loads(hv("sflow", "show", "--json").stdout)
    jsonschemas.check(documents.SFLOW_SHOW, doc)
    (br,) = [b for b in doc["bridges"] if b["bridge"] == "xenbr0"]
    assert br["configured"] and br["owner"] == "hvnet"
    assert br["settings"]["targets"] == ["192.0.2.9:6343"] and br["settings"]["sampling"] == 64
    assert "sFlow to 192.0.2.9:6343 1-in-64" in hv("sflow", "show", "xenbr0").stdout

    ipfix_doc = json.loads(hv("ipfix", "show", "xenbr0", "--json").stdout)
    jsonschemas.check(documents.IPFIX_SHOW, ipfix_doc)
    (ipfix,) = ipfix_doc["bridges"]
    assert ipfix["configured"] is False and ipfix["settings"] is None

    missing = hv("ipfix", "show", "br-none", "--json")
    assert missing.returncode == 2 and missing.stdout == ""
    assert json.loads(missing.stderr)["error"]["message"] == "no bridge named 'br-none'"

    assert hv("sflow", "clear", "xenbr0").returncode == 0
    assert "no sFlow" in hv("sflow", "show", "xenbr0").stdout
