"""QoS rules for logical ports with hostile names, written by hvnet into a real NB and read by OVN itself.

ovn-northd copies each rule's match into the SB's logical flows and
ovn-trace parses them with OVN's own lexer, as ovn-controller does on a
chassis: the rule must meter its own port's frames and no other port's.
Only central daemons run here (unix sockets in a temporary directory).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.target import DbTarget
from appliance.lab.ovn import Central
from appliance.ovn import plan as ovn_plan
from appliance.ovn import write
from appliance.ovn.model import Desired
from appliance.ovn.read import read_pool

pytestmark = pytest.mark.skipif(not (shutil.which("ovn-northd") and shutil.which("ovn-trace")),
                                reason="ovn-central (make setup installs it)")  # fmt: skip

HOSTILE = ['p1" || ip4 || outport == "p2', "p3\\", "p4\x1b]0;owned\x07"]
INNOCENT = "p2"


@pytest.fixture
def central(tmp_path: Path) -> Iterator[Central]:
    c = Central(tmp_path / "ovn")
    try:
        c.start({})
        yield c
    finally:
        c.stop()


def _trace(c: Central, port: str, n: int) -> str:
    flow = (f"inport == {_quoted(port)} && eth.src == 02:00:00:00:00:0{n} && eth.dst == 02:00:00:00:00:99 && "
            f"ip4.src == 10.0.0.{n} && ip4.dst == 10.0.0.99 && ip.ttl == 64")  # fmt: skip
    argv = ["ovn-trace", f"--db={c.remote('sb')}", "sw", flow]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def _quoted(name: str) -> str:
    """The test's own quoting for its microflows (what OVN's lexer takes: a JSON string literal)."""
    import json

    return json.dumps(name, ensure_ascii=False)


def test_each_rule_meters_its_own_port_and_no_other(central: Central) -> None:
    central.nbctl("ls-add", "sw")
    for n, name in enumerate([*HOSTILE, INNOCENT], start=1):
        central.nbctl("lsp-add", "sw", name)
        central.nbctl("lsp-set-addresses", name, f"02:00:00:00:00:0{n} 10.0.0.{n}")
    nb, sb = DbTarget(central.remote("nb"), "test"), DbTarget(central.remote("sb"), "test")
    view = read_pool("test", nb, sb, 10.0)
    rates = {name: 1000 * n for n, name in enumerate(HOSTILE, start=1)}
    plan = ovn_plan.diff(view, Desired(limits={(p, "from-lport"): (r, 100) for p, r in rates.items()}))
    assert len(plan.add) == len(HOSTILE)
    write.commit(nb, view, plan, "test")
    central.nbctl("--wait=sb", "sync")
    assert "set_meter" not in _trace(central, INNOCENT, 4)  # a pasted name would meter all IPv4 here
    for n, name in enumerate(HOSTILE, start=1):
        assert f"set_meter({rates[name]}, 100)" in _trace(central, name, n), name  # a trailing \ loses it
    assert not ovn_plan.diff(read_pool("test", nb, sb, 10.0), Desired(limits={
        (p, "from-lport"): (r, 100) for p, r in rates.items()})).changed  # fmt: skip
