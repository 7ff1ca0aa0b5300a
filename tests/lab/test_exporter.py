"""``hvnet exporter`` on the 2010 study's lab: the real process on a free port, scraped over HTTP with
urllib, parsed by prometheus-client's own parser, and checked against ovs-vsctl after known traffic;
limits on the three VIFs enforced by a meter, by htb, and not by tc (this kernel lacks act_police);
a stopped ovsdb-server answered within the scrape timeout with hvnet_up 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from appliance.lab import Lab
from tests.conftest import HVNET, ROOT, run_hvnet
from tests.lab.policy_helpers import reset, vsctl
from tests.lab.test_policy_agent import AgentProc, wait_until

TAGS = {"vif1.0": 1, "vif2.0": 1, "vif3.0": 2}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Exporter:
    """The exporter as an operator starts it, stopped by its PID."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        argv = [*HVNET, "exporter", "--listen", "127.0.0.1:0", "--policy", "none", *args]
        self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})  # fmt: skip
        line = self.proc.stdout.readline() if self.proc.stdout else ""  # blocks until it listens (or exits)
        assert "serving http://" in line, line + (self.proc.stderr.read() if self.proc.stderr else "")
        self.url = line.split("serving ", 1)[1].split()[0]

    def scrape(self, timeout: float = 10.0) -> Samples:
        with urllib.request.urlopen(self.url, timeout=timeout) as reply:
            text = reply.read().decode()
        out: Samples = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stderr.read() if self.proc.stderr else ""


@pytest.fixture(scope="module")
def exporter(lab: Lab) -> Iterator[Exporter]:
    exp = Exporter("--check-interval", "1", "--scrape-timeout", "1")
    try:
        yield exp
    finally:
        err = exp.stop()
        assert exp.proc.returncode == 0, err
        assert "Traceback" not in err, err


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels``."""
    found = [v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def ovsdb_stats(lab: Lab, table: str, row: str) -> dict[str, int]:
    text = vsctl(lab, "--format=json", "--columns=statistics", "find", table, f"name={row}")
    pairs = json.loads(text)["data"][0][0][1]
    return {k: int(v) for k, v in pairs}


def test_vif_counters_match_ovsdb_after_pings(lab: Lab, exporter: Exporter) -> None:
    before = exporter.scrape()
    vif1 = {"vif": "vif1.0"}  # VIF series carry the vif alone; the VM, VLAN and bridge are on hvnet_vif_info
    rx0 = value(before, "hvnet_vif_rx_packets_total", **vif1)
    assert rx0 is not None and value(before, "hvnet_up") == 1
    assert value(before, "hvnet_vif_info", vif="vif1.0", vm="VM1", vlan="1", bridge="xenbr0") == 1
    assert not [n for (n, ls) in before if n.startswith("hvnet_") and "host" in dict(ls)]  # this machine's switch
    ping = lab.guest_exec("VM1", ["ping", "-c", "20", "-i", "0.05", "-q", "192.168.0.151"])
    assert ping.returncode == 0, ping.stdout
    after = exporter.scrape()
    assert value(after, "hvnet_vif_rx_packets_total", **vif1) - rx0 >= 20  # 20 echo requests from VM1
    assert (
        value(after, "hvnet_vif_tx_packets_total", vif="vif2.0")
        - value(before, "hvnet_vif_tx_packets_total", vif="vif2.0")
        >= 20
    )  # delivered to VM2
    # Against ovs-vsctl: OVS writes the statistics every 5 s from the same kernel counters, so a write made
    # after one scrape and before another lies between them, counter by counter (equal when nothing moved).
    first = exporter.scrape()
    time.sleep(6)
    witness = {v: ovsdb_stats(lab, "Interface", v) for v in TAGS}
    last = exporter.scrape()
    for vif in TAGS:
        for key in ("rx_packets", "tx_packets", "rx_bytes", "tx_bytes", "rx_dropped", "tx_dropped"):
            name = f"hvnet_vif_{key}_total"
            assert value(first, name, vif=vif) <= witness[vif][key] <= value(last, name, vif=vif), (vif, key)


def test_limits_and_their_enforcement(lab: Lab, exporter: Exporter) -> None:
    try:
        for vif, how in (("vif1.0", "meter"), ("vif2.0", "tc")):
            res = run_hvnet("qos", "set", vif, "--ingress-rate", "10240", "--ingress-burst", "1024",
                            "--mechanism", how)  # fmt: skip
            assert "Traceback" not in res.stderr, res.stderr
        res = run_hvnet("qos", "set", "vif3.0", "--egress-rate", "20000")
        assert res.returncode == 0, res.stderr
        start = time.monotonic()
        while time.monotonic() - start < 15:
            got = exporter.scrape()
            if len([k for k in got if k[0] == "hvnet_vif_limit_enforced"]) == 3:
                break
            time.sleep(0.5)
        enforced = {(dict(ls)["vif"], dict(ls)["direction"], dict(ls)["mechanism"]): v
                    for (n, ls), v in got.items() if n == "hvnet_vif_limit_enforced"}  # fmt: skip
        assert enforced == {
            ("vif1.0", "ingress", "meter"): 1.0,
            ("vif2.0", "ingress", "tc"): 0.0,  # OVS logs the failure; the rate is not enforced here
            ("vif3.0", "egress", "htb"): 1.0,
        }
        # OVSDB's kbit/s and kbit, exported in bytes: 10240 kbit/s is 1,280,000 bytes/s
        assert value(got, "hvnet_vif_ingress_policing_rate_bytes_per_second", vif="vif1.0") == 10240e3 / 8
        assert value(got, "hvnet_vif_ingress_policing_burst_bytes", vif="vif2.0") == 1024e3 / 8
        assert value(got, "hvnet_vif_egress_max_rate_bytes_per_second", vif="vif3.0") == 20000e3 / 8
        assert int(vsctl(lab, "get", "interface", "vif2.0", "ingress_policing_rate")) == 10240  # the witness
    finally:
        reset(lab, TAGS)


def test_mirror_and_sampling(lab: Lab, exporter: Exporter) -> None:
    try:
        vsctl(lab, "--", "--id=@p", "get", "port", "vif1.0", "--", "--id=@o", "get", "port", "vif3.0",
              "--", "--id=@m", "create", "mirror", "name=m1", "select-src-port=@p", "output-port=@o",
              "--", "add", "bridge", "xenbr0", "mirrors", "@m")  # fmt: skip
        res = run_hvnet("sflow", "set", "xenbr0", "--target", "127.0.0.1:6343", "--sampling", "10")
        assert res.returncode == 0, res.stderr
        ping = lab.guest_exec("VM1", ["ping", "-c", "10", "-i", "0.05", "-q", "192.168.0.151"])
        assert ping.returncode == 0
        assert wait_until(lambda: ovsdb_stats(lab, "Mirror", "m1").get("tx_packets", 0) >= 10, 8)
        for _ in range(3):  # the exporter reads the Mirror row's statistics: equal unless OVS wrote meanwhile
            want = ovsdb_stats(lab, "Mirror", "m1")
            got = exporter.scrape()
            if ovsdb_stats(lab, "Mirror", "m1") == want:
                break
        labels = {"mirror": "m1", "bridge": "xenbr0", "output": "vif3.0"}
        assert value(got, "hvnet_mirror_tx_packets_total", **labels) == want["tx_packets"]
        assert value(got, "hvnet_mirror_tx_bytes_total", **labels) == want["tx_bytes"]
        assert value(got, "hvnet_sflow_sampling_rate", bridge="xenbr0") == 10
        assert value(got, "hvnet_sflow_targets", bridge="xenbr0") == 1
        assert value(got, "hvnet_ipfix_sampling_rate", bridge="xenbr0") is None  # none configured: absent
    finally:
        vsctl(lab, "clear", "bridge", "xenbr0", "sflow", "ipfix", "mirrors")


def test_vswitchd_threads_and_self(lab: Lab, exporter: Exporter) -> None:
    got = exporter.scrape()
    threads = {dict(ls)["thread"] for (n, ls) in got if n == "hvnet_ovs_vswitchd_cpu_seconds_total"}
    assert "ovs-vswitchd" in threads and any(t.startswith("handler") for t in threads), threads
    pid = int((lab.switch.run_dir / "ovs-vswitchd.pid").read_text())
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    process = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # live threads only
    total = sum(v for (n, _), v in got.items() if n == "hvnet_ovs_vswitchd_cpu_seconds_total")
    assert 0 <= total <= process + 0.05
    assert value(got, "hvnet_exporter_scrape_duration_seconds") < 1.0
    assert value(got, "hvnet_agent_running") == 0  # no agent on the lab's switch


def test_stopped_ovsdb_gives_up_within_the_timeout(lab: Lab, exporter: Exporter) -> None:
    pid = int((lab.switch.run_dir / "ovsdb-server.pid").read_text())
    errors_before = value(exporter.scrape(), "hvnet_exporter_scrape_errors_total", stage="ovsdb") or 0
    os.kill(pid, signal.SIGSTOP)  # alive, accepting connections, answering nothing
    try:
        start = time.monotonic()
        got = exporter.scrape()
        took = time.monotonic() - start
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"scrape with a stopped ovsdb-server: {took:.2f} s")
    assert took < 3.5  # --scrape-timeout 1: the schema or the read, then the answer
    assert value(got, "hvnet_up") == 0
    assert value(got, "hvnet_vifs") is None  # nothing read: nothing said
    assert value(got, "hvnet_exporter_scrape_errors_total", stage="ovsdb") == errors_before + 1
    assert value(exporter.scrape(), "hvnet_up") == 1  # back as soon as the server answers


def test_agent_health_and_drift(lab: Lab, tmp_path: Path) -> None:
    """Drift from a policy file, then an agent that takes the lock and makes the switch match it."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("vifs:\n  - vm: VM1\n    vlan: {tag: 5}\n  - vm: VM2\n    vlan: {tag: 6}\n")
    exp = Exporter("--check-interval", "1", "--scrape-timeout", "1", "--policy", str(policy))
    agent = None
    try:
        before = time.time()
        assert wait_until(lambda: value(exp.scrape(), "hvnet_policy_check_timestamp_seconds") is not None, 10)
        got = exp.scrape()
        assert value(got, "hvnet_policy_drift", policy=str(policy)) == 2  # two tags differ, as verify says
        assert value(got, "hvnet_agent_running") == 0
        agent = AgentProc(policy, tmp_path / "agent.log")
        assert wait_until(lambda: vsctl(lab, "get", "port", "vif2.0", "tag") == "6", 15), agent.text()
        assert wait_until(lambda: value(exp.scrape(), "hvnet_policy_drift") == 0, 10)
        got = exp.scrape()
        assert value(got, "hvnet_agent_running") == 1
        changed = value(got, "hvnet_agent_last_change_timestamp_seconds")
        assert changed is not None and before - 1 <= changed <= time.time()
    finally:
        if agent is not None:
            assert agent.stop() == 0, agent.text()
        err = exp.stop()
        assert exp.proc.returncode == 0 and "Traceback" not in err, err
        reset(lab, TAGS)


def test_a_libvirt_that_never_answers_costs_names_not_the_scrape(lab: Lab, tmp_path: Path) -> None:
    """libvirt's socket accepts and says nothing (a hung libvirtd): every scrape still answers within
    --scrape-timeout with the switch's figures, the VIFs labelled with their VM's uuid, and says so."""
    import socket

    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(tmp_path / "libvirt-sock"))
    silent.listen(16)  # connections complete in the backlog; nothing is ever read or written
    uri = f"qemu+unix:///system?socket={tmp_path}/libvirt-sock"
    exp = Exporter("--scrape-timeout", "2", env={"HVNET_LIBVIRT_URI": uri})
    try:
        for _ in range(3):
            start = time.monotonic()
            got = exp.scrape(timeout=10)
            took = time.monotonic() - start
            print(f"scrape with a silent libvirt: {took:.2f} s")
            assert took < 2.5
            assert value(got, "hvnet_up") == 1 and value(got, "hvnet_exporter_scrape_timed_out") == 0
            (info,) = [dict(ls) for (n, ls), _ in got.items() if n == "hvnet_vif_info" and ("vif", "vif1.0") in ls]
            assert info["vm"] == "", info  # the name was not known in time; the uuid says which VM
            assert len(info["vm_uuid"]) == 36 and info["vm_uuid"].count("-") == 4, info
            assert value(got, "hvnet_vif_link_up", vif="vif1.0") is not None  # its series, labelled as ever
        assert (value(got, "hvnet_exporter_scrape_errors_total", stage="names") or 0) >= 3
    finally:
        err = exp.stop()
        silent.close()
    assert exp.proc.returncode == 0 and "Traceback" not in err, err
