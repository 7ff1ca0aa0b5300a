"""Policing and shaping on the kernel datapath, proved by traffic: the lab's VM host (QEMU, OVS's kernel
datapath, tc) with two guests, netperf between them inside the VM.

- ingress policing at the 2010 study's 10240 kbit/s, burst 1024 kbit: the probe finds tc works and hvnet
  chooses it; tc's own police counters (passed, dropped) are the enforcement evidence;
- egress shaping (linux-htb) measured the same way, with the htb qdisc's counters;
- OpenFlow meters on the kernel datapath: the switch says it has them, hvnet installs one, traffic shows the
  kernel enforces it;
- the quick suite and seed-2010's policed steps on the VM host's guests.

Steps are 5 s (seed-2010's are the study's 10 s): the bucket starts full, so its burst adds ``burst / seconds`` to what may pass; at 1024 kbit
over 5 s that is 0.2 Mbit/s (2% of the rate), and the figures are printed both against the rate and
against rate plus burst.  Under TCG only what is robust is asserted; the issue's targets (TCP >= 0.80, UDP
within 5%) are printed beside the figures (``make bench`` section kernel-police measures them side by side
with the userspace datapath).  The lab (the real ``hvnet lab up``) is the one the modules on the VM host's guests
share (tests/vm/vmlab.py); each test clears the policy it applied.  Needs root: run it under
``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from appliance.policy.apply import openflow
from tests.conftest import run_hvnet
from tests.vm import vmlab

pytestmark = [pytest.mark.vm, pytest.mark.shared_lab("guests")]

HOST = vmlab.HOST  # its guests VM1 and VM2: the names the shipped suites (quick, seed-2010) and their policies use
SERVER_IP = "10.77.0.2"
PORT = 12866  # this module's own netserver: the suites start theirs on netperf's default port
RATE_KBPS = 10240  # the 2010 study's ingress_policing_rate and ingress_policing_burst
BURST_KBIT = 1024
SECONDS = 5
# seed-2010's 10 instances start up to ~130 ms apart here (over SSH, under TCG) and each is measured over its own
# run, so their sum overstates what the policer passed by about the share of the step the stagger covers: 1.054 of
# rate plus burst in a run at 5 s steps, 0.98-1.00 at the study's 10 s
SEED_SECONDS = 10


@pytest.fixture(scope="module")
def vm_lab(vm_labs: vmlab.Labs) -> Lab:
    return vm_labs.get(vmlab.GUESTS_TOPOLOGY, HOST)


def in_vm(lab: Lab, command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return vmlab.in_vm(lab, HOST, command, timeout=timeout, check=check)


def hv(lab: Lab, *args: str, timeout: float = 300) -> dict:
    res = run_hvnet("--host", HOST, *args, "--json", env={"HVNET_LAB_DIR": str(lab.run_dir)}, timeout=timeout)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def quoted(argv: list[str]) -> str:
    return " ".join(map(shlex.quote, argv))


@pytest.fixture(scope="module")
def netserver(vm_lab: Lab) -> Iterator[int]:
    """A netserver in VM2's namespace for this module's own netperf runs, stopped by its pid."""
    argv = ["ip", "netns", "exec", vm_lab.ns_of("VM2"), "netserver", "-D", "-4", "-p", str(PORT)]
    pid = int(in_vm(vm_lab, f"{quoted(argv)} </dev/null >/dev/null 2>&1 & echo $!").stdout.strip())
    time.sleep(1.0)
    try:
        yield pid
    finally:
        in_vm(vm_lab, f"kill {pid}", check=False)


def netperf(lab: Lab, test: str, seconds: int = SECONDS) -> tuple[float, float]:
    """(Mbit/s netserver received from VM1, seconds the test ran), netperf in VM1's namespace."""
    argv = ["ip", "netns", "exec", lab.ns_of("VM1"), "netperf", "-H", SERVER_IP, "-p", str(PORT), "-t", test,
            "-l", str(seconds), "-P", "0", "--", "-m", "1400",
            "-k", "REMOTE_RECV_THROUGHPUT,THROUGHPUT_UNITS,ELAPSED_TIME"]  # fmt: skip
    out = in_vm(lab, quoted(argv), timeout=seconds + 60).stdout
    fields = dict(line.split("=", 1) for line in out.split() if "=" in line)
    assert fields["THROUGHPUT_UNITS"] == "10^6bits/s", out
    return float(fields["REMOTE_RECV_THROUGHPUT"]), float(fields["ELAPSED_TIME"])


def fidelity(received_mbps: float, seconds: float, rate_kbps: int, burst_kbit: int) -> tuple[float, float]:
    """(achieved ÷ configured, achieved ÷ (rate + what the full bucket adds over the test))."""
    rate = rate_kbps / 1000.0
    return received_mbps / rate, received_mbps * seconds / (rate * seconds + burst_kbit / 1000.0)


def police_counters(lab: Lab, port: str) -> tuple[int, int]:
    """(packets, dropped) of the police action on ``port``'s ingress, read by the parser hvnet uses."""
    from appliance.policy.apply.tcpolice import parse_police

    (police,) = parse_police(in_vm(lab, f"tc -s filter show dev {shlex.quote(port)} ingress").stdout)
    assert (police.rate_kbit, police.burst_bytes) == (RATE_KBPS, BURST_KBIT * 1024 // 8), police
    return police.packets, police.dropped


def write_policy(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return str(path)


def test_the_probe_chooses_tc_and_tc_polices_tcp_and_udp_at_the_2010_rate(
    vm_lab: Lab, netserver: int, tmp_path: Path
) -> None:
    """policing: auto on the VM host is tc (its probe found the kernel runs the police action); TCP and UDP
    over 5 s each stay at the rate plus the burst, and tc's own counters show what passed and what it dropped."""
    policy = write_policy(tmp_path, f"version: 1\npolicing: auto\nvifs:\n  - vm: VM1\n    ingress: "
                                    f"{{rate: {RATE_KBPS}, burst: {BURST_KBIT}}}\n")  # fmt: skip
    out = hv(vm_lab, "apply", policy)
    try:
        (applied,) = [e for e in out["enforcement"] if e["kind"] == "ingress"]
        assert (applied["port"], applied["mechanism"], applied["verified"]) == ("vif1.0", "tc", True), applied
        figures, counted = {}, {}
        for test in ("TCP_STREAM", "UDP_STREAM"):
            before = police_counters(vm_lab, "vif1.0")
            got, seconds = netperf(vm_lab, test)
            after = police_counters(vm_lab, "vif1.0")
            figures[test] = (got, *fidelity(got, seconds, RATE_KBPS, BURST_KBIT))
            counted[test] = (after[0] - before[0] - (after[1] - before[1]), after[1] - before[1])
    finally:
        hv(vm_lab, "qos", "clear", "vm:VM1")
    print(f"\ntc police {RATE_KBPS} kbit/s burst {BURST_KBIT} kbit on the kernel datapath (QEMU TCG), {SECONDS} s: "
          + "; ".join(f"{t} {m:.2f} Mbit/s = {r:.3f} of the rate, {f:.3f} of rate + burst "
                      f"(tc: {counted[t][0]} passed, {counted[t][1]} dropped)" for t, (m, r, f) in figures.items()))  # fmt: skip
    # UDP is offered far beyond the rate (~140 Mbit/s unpoliced here): tc drops most, what passes is the rate
    assert counted["UDP_STREAM"][1] > counted["UDP_STREAM"][0] > 0, counted
    assert 0.9 <= figures["UDP_STREAM"][2] <= 1.05, figures
    # one TCP flow backs off at every drop of a 1024 kbit bucket: 0.51 to 0.93 of the rate in runs here (TCG),
    # never above rate + burst
    assert counted["TCP_STREAM"][0] > 0 and counted["TCP_STREAM"][1] > 0, counted
    assert 0.3 <= figures["TCP_STREAM"][2] <= 1.05, figures


def htb_counters(lab: Lab, port: str) -> tuple[int, int]:
    """(packets sent, times held back) of the htb root qdisc on ``port``, and its root class's rate checked."""
    from appliance.policy.apply.tcpolice import parse_htb, parse_htb_rate_kbit

    qdisc = parse_htb(in_vm(lab, f"tc -s qdisc show dev {shlex.quote(port)}").stdout)
    assert qdisc is not None
    assert parse_htb_rate_kbit(in_vm(lab, f"tc class show dev {shlex.quote(port)}").stdout) == RATE_KBPS
    return qdisc.packets, qdisc.overlimits


def test_htb_shapes_what_the_guest_receives_at_the_rate(vm_lab: Lab, netserver: int, tmp_path: Path) -> None:
    """An egress rate on VM2 is OVS's linux-htb QoS on vif2.0: VM1's TCP and UDP into VM2 are held to it,
    and the htb qdisc's counters show it held packets back."""
    policy = write_policy(tmp_path, f"version: 1\nvifs:\n  - vm: VM2\n    egress: {{rate: {RATE_KBPS}}}\n")
    out = hv(vm_lab, "apply", policy)
    try:
        (applied,) = [e for e in out["enforcement"] if e["kind"] == "egress"]
        assert (applied["port"], applied["mechanism"], applied["verified"]) == ("vif2.0", "htb", True), applied
        figures, counted = {}, {}
        for test in ("TCP_STREAM", "UDP_STREAM"):
            before = htb_counters(vm_lab, "vif2.0")
            got, _ = netperf(vm_lab, test)
            after = htb_counters(vm_lab, "vif2.0")
            figures[test] = got / (RATE_KBPS / 1000.0)
            counted[test] = (after[0] - before[0], after[1] - before[1])
    finally:
        hv(vm_lab, "qos", "clear", "vm:VM2")
    print(f"\nhtb {RATE_KBPS} kbit/s egress on the kernel datapath (QEMU TCG), {SECONDS} s: "
          + "; ".join(f"{t} {r:.3f} of the rate (htb: {counted[t][0]} packets sent, held back {counted[t][1]} times)"
                      for t, r in figures.items()))  # fmt: skip
    assert all(sent > 0 and held > 0 for sent, held in counted.values()), counted
    # TCG: UDP's sender takes the vCPUs htb dequeues on; runs here received 0.83 to 0.95 of the rate (TCP 0.96)
    assert all(0.6 <= r <= 1.05 for r in figures.values()), figures


def test_openflow_meters_are_enforced_by_the_kernel_datapath(vm_lab: Lab, netserver: int, tmp_path: Path) -> None:
    """The kernel datapath has meters (OVS 3.1 on Linux 6.1): the switch offers them, 'policing: meter' installs
    one with its flow, and traffic shows the kernel drops beyond the rate -- the meter's band counts the drops."""
    features = in_vm(vm_lab, "ovs-ofctl -O OpenFlow13 meter-features xenbr0").stdout
    assert (m := re.search(r"max_meter:(\d+)", features)) and int(m.group(1)) > 0, features
    assert "band_types: drop" in features and "kbps" in features, features
    policy = write_policy(tmp_path, f"version: 1\npolicing: meter\nvifs:\n  - vm: VM1\n    ingress: "
                                    f"{{rate: {RATE_KBPS}, burst: {BURST_KBIT}}}\n")  # fmt: skip
    out = hv(vm_lab, "apply", policy)
    try:
        (applied,) = [e for e in out["enforcement"] if e["kind"] == "ingress"]
        assert (applied["port"], applied["mechanism"], applied["verified"]) == ("vif1.0", "meter", True), applied
        assert in_vm(vm_lab, "tc filter show dev vif1.0 ingress").stdout.strip() == ""  # no tc behind it
        figures, drops = {}, {}
        for test in ("UDP_STREAM", "TCP_STREAM"):
            before = meter_drops(vm_lab)
            got, seconds = netperf(vm_lab, test)
            drops[test] = meter_drops(vm_lab) - before
            figures[test] = (got, *fidelity(got, seconds, RATE_KBPS, BURST_KBIT))
    finally:
        hv(vm_lab, "qos", "clear", "vm:VM1")
    print(f"\nOpenFlow meter {RATE_KBPS} kbit/s burst {BURST_KBIT} kbit on the kernel datapath (QEMU TCG), "
          f"{SECONDS} s: " + "; ".join(f"{t} {m:.2f} Mbit/s = {r:.3f} of the rate, {f:.3f} of rate + burst "
                                       f"(band dropped {drops[t]})" for t, (m, r, f) in figures.items()))  # fmt: skip
    assert drops["UDP_STREAM"] > 0 and 0.9 <= figures["UDP_STREAM"][2] <= 1.05, (figures, drops)
    assert 0.3 <= figures["TCP_STREAM"][2] <= 1.05, figures


def meter_drops(lab: Lab) -> int:
    (dropped,) = openflow.parse_meter_stats(in_vm(lab, "ovs-ofctl -O OpenFlow13 meter-stats xenbr0").stdout).values()
    return dropped


def run_suite(lab: Lab, suite: str, out: Path, *options: str) -> dict:
    res = run_hvnet("suite", "run", suite, "--topology", lab.state["topology_file"], "--out", str(out), *options,
                    "--json", env={"HVNET_LAB_DIR": str(lab.run_dir)}, timeout=400)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    meta = doc["meta"]
    assert (doc["state"], meta["host"], meta["datapath_types"]) == ("complete", HOST, ["system"]), doc["state"]
    assert meta["kernel"].endswith("-cloud-amd64"), meta["kernel"]  # the VM's kernel, not this machine's
    return doc


def test_the_quick_suite_runs_on_the_vm_hosts_guests(vm_lab: Lab, tmp_path: Path) -> None:
    """Every test type at concurrency 1 and 4 (one repetition of 1 s each: TCG), no instance lost."""
    started = time.monotonic()
    doc = run_suite(vm_lab, "quick", tmp_path / "quick", "--repetitions", "1", "--duration", "1")
    lost = {s["key"]: s["repetitions"][0]["aggregate"]["lost"] for s in doc["steps"]}
    print(f"\nquick on {HOST} ({time.monotonic() - started:.0f} s): "
          + ", ".join(f"{s['key']} {s['repetitions'][0]['aggregate']['sum']}" for s in doc["steps"]))  # fmt: skip
    assert len(doc["steps"]) == 10 and set(lost.values()) == {0}, lost


def test_seed_2010s_policed_steps_on_the_vm_host_are_the_tc_policer(
    vm_lab: Lab, netserver: int, tmp_path: Path
) -> None:
    """seed-2010 (both VIFs policed at 10240/1024, -m 10000) at concurrency 10 for 10 s: netperf and netserver
    run in the VM's namespaces; tc polices; the verdict names the policer from tc's own drop count (TCP through
    it, UDP's fragments dropped by it). Nothing of the run is left in the VM.

    conntrack tracks the guests' namespaces: with the table the kernel sizes for 512 MB (4096 entries)
    tcp-crr's 10 instances filled it with TIME_WAIT entries and udp-rr's sends then failed (EPERM); the VM
    host's init sizes it as a hypervisor's would."""
    assert int(in_vm(vm_lab, "cat /proc/sys/net/netfilter/nf_conntrack_max").stdout) >= 65536
    started = time.monotonic()
    doc = run_suite(vm_lab, "seed-2010", tmp_path / "seed",
                    "--concurrency", "10", "--duration", str(SEED_SECONDS), "--repetitions", "1")  # fmt: skip
    took = time.monotonic() - started
    assert (
        f"{HOST} is another machine: its CPU and ovs-vswitchd's are not measured (nor are netperf's and "
        "netserver's: they ran there)" in doc["meta"]["warnings"]
    ), doc["meta"]["warnings"]
    steps = {s["test"]: s for s in doc["steps"]}
    assert set(steps) == {"tcp-stream", "udp-stream", "tcp-crr", "udp-rr"}, list(steps)
    for name, step in steps.items():
        pol = step["policing"]
        assert (pol["port"], pol["rate_bits_per_s"], pol["burst_bits"], pol["mechanism"], pol["verified"]) == (
            "vif1.0", RATE_KBPS * 1000, BURST_KBIT * 1000, "tc", True), (name, pol)  # fmt: skip
        (rep,) = step["repetitions"]
        assert rep["aggregate"]["lost"] == 0, (name, rep["aggregate"])
        assert rep["meter_drops"] is not None, name  # tc's police counter, read around the repetition
    tcp, udp = (steps[n]["repetitions"][0] for n in ("tcp-stream", "udp-stream"))
    ratio, fed = fidelity(tcp["aggregate"]["sum"], SEED_SECONDS, RATE_KBPS, BURST_KBIT)
    print(f"\nseed-2010 on {HOST} at c10, {SEED_SECONDS} s ({took:.0f} s): TCP {ratio:.3f} of the rate ({fed:.3f} of "
          f"rate + burst), tc dropped {tcp['meter_drops']}; UDP -m 10000 received "
          f"{udp['aggregate']['received_mbps']} Mbit/s, tc dropped {udp['meter_drops']}; verdicts "
          + ", ".join(f"{n} {s['verdict']['verdict']}" for n, s in steps.items()))  # fmt: skip
    for name in ("tcp-stream", "udp-stream"):
        v = steps[name]["verdict"]
        assert v["verdict"] == "policer" and v["evidence"][0].startswith("the tc police action on vif1.0 dropped "), v
    assert any("burst lets" in e for e in steps["tcp-stream"]["verdict"]["evidence"])
    assert 0.5 <= fed <= 1.05 and tcp["meter_drops"] > 0 and udp["meter_drops"] > 0, (fed, tcp, udp)
    left = in_vm(vm_lab, LEFT_IN_VM.replace("OURS", str(netserver)), check=False)
    assert left.stdout.strip() == "" and left.returncode == 0, left.stdout + left.stderr


# The control shell made its work dir under the host's endpoints directory and removed it (the VM's PATH is
# curated: no ps or ls there, the shell's own reads suffice); OURS is this module's netserver, not the suite's.
LEFT_IN_VM = r"""for p in /proc/[0-9]*; do
  [ "${p#/proc/}" = OURS ] && continue
  c=; read -r c <"$p/comm" 2>/dev/null; case $c in netperf|netserver) echo "$c still runs: ${p#/proc/}";; esac
done
d=/var/lib/hvnet/endpoints
[ -d "$d" ] || echo "no $d"
for f in "$d"/* "$d"/.[!.]*; do [ -e "$f" ] && echo "left: $f"; done
true
"""
