"""``hvnet exporter --hosts``: two lab hypervisors over SSH and one that never answers, in one scrape."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from appliance.lab.sshhost import SshHost
from tests.lab.remote_helpers import xen_ssh_host
from tests.lab.test_exporter import Exporter, value

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

GHOST = "169.254.250.2"  # nothing answers there


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SshHost]]:
    base = tmp_path_factory.mktemp("exporter-fleet")
    with ExitStack() as stack:
        yield [
            stack.enter_context(xen_ssh_host(name, base, index, vifs=2)) for name, index in (("ex1", 70), ("ex2", 71))
        ]


@pytest.fixture
def exporter(fleet: list[SshHost], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Exporter]:
    config = tmp_path / "ssh_config"
    config.write_text("".join(h.ssh_config.read_text() for h in fleet))
    lines = ["hosts:"]
    for h in fleet:
        lines += [f"  - name: {h.name}", "    group: ex", f"    ovs_rundir: {h.switch.run_dir}"]
    lines += ["  - name: ghost", f"    address: {GHOST}", "    group: ex"]
    (tmp_path / "hosts.yaml").write_text("\n".join(lines) + "\n")
    for k, v in {"HVNET_INVENTORY": str(tmp_path / "hosts.yaml"), "HVNET_SSH_CONFIG": str(config),
                 "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
                 "HVNET_LAB_DIR": str(tmp_path / "no-lab")}.items():  # fmt: skip
        monkeypatch.setenv(k, v)
    exp = Exporter("--hosts", "ex", "--scrape-timeout", "3")
    try:
        yield exp
    finally:
        err = exp.stop()
        assert exp.proc.returncode == 0 and "Traceback" not in err, err


def test_every_host_in_one_scrape_and_a_dead_one_is_up_0(fleet: list[SshHost], exporter: Exporter) -> None:
    start = time.monotonic()
    got = exporter.scrape(timeout=30)
    first = time.monotonic() - start
    start = time.monotonic()
    again = exporter.scrape(timeout=30)
    print(f"scrape of two SSH hosts and a dead one: first {first:.2f} s (SSH masters opened), then "
          f"{time.monotonic() - start:.2f} s")  # fmt: skip
    for g in (got, again):
        assert value(g, "hvnet_up", host="ex1") == 1 and value(g, "hvnet_up", host="ex2") == 1
        assert value(g, "hvnet_up", host="ghost") == 0
        assert value(g, "hvnet_vifs", host="ex1") == 2 and value(g, "hvnet_vifs", host="ex2") == 2
    assert time.monotonic() - start < 4.0  # the ghost costs at most the deadline (3 s), not more
    for h in fleet:  # each host's own counters, as its ovs-vsctl says (internal ports: nothing moves)
        text = subprocess.run(["ovs-vsctl", f"--db={h.switch.remote}", "--format=json", "--columns=statistics",
                               "find", "Interface", "name=vif1.0"], capture_output=True, text=True, check=True,
                              timeout=30).stdout  # fmt: skip
        stats = dict(json.loads(text)["data"][0][0][1])
        assert value(again, "hvnet_vif_tx_packets_total", host=h.name, vif="vif1.0") == stats["tx_packets"]
        assert value(again, "hvnet_vif_info", host=h.name, vif="vif1.0", vm="", vm_uuid="vm-1") == 1  # no XAPI: no name
        threads = {dict(ls)["thread"] for (n, ls) in again if n == "hvnet_ovs_vswitchd_cpu_seconds_total"
                   and dict(ls)["host"] == h.name}  # fmt: skip
        assert "ovs-vswitchd" in threads, threads  # read from the host's /proc over SSH
    assert value(again, "hvnet_exporter_scrape_errors_total", host="ghost", stage="connect") >= 1
