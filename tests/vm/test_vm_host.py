"""The kernel-datapath VM host booted for real: image, QEMU, sshd with strict host keys, OVS on the kernel
datapath, tc policing installed by OVS, and nothing left after it stops.

One boot for the module (under TCG here, about half a minute).  Needs root
(tap device, debootstrap for a first build).  Other suites create taps and
guests on the same host: run it under ``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.errors import LabError
from appliance.lab.vmhost import boot
from appliance.lab.vmhost import image as vmhost_image
from appliance.lab.vmhost.image import PackagesUnavailable, VmHostImage, build_image
from tests.conftest import run_hvnet
from tests.lab.remote_helpers import apply_stopped_at

pytestmark = pytest.mark.vm

NAME, INDEX = "khtest", 7  # tap hvk7: apart from any other lab's


@pytest.fixture(scope="module")
def image() -> VmHostImage:
    if shutil.which("qemu-system-x86_64") is None or shutil.which("qemu-img") is None:
        pytest.skip("QEMU is not installed (packages qemu-system-x86 and qemu-utils; .ci/setup-host installs them)")
    if os.geteuid() != 0:
        pytest.fail("the VM host test needs root (tap device, debootstrap)")
    img = build_image()
    print(f"\nVM host image {img.digest[:12]}: {'built' if img.built else 'found'} in {img.seconds:.1f} s, "
          f"root {img.root_bytes / 1e6:.0f} MB on disk ({img.root.stat().st_size / 1e6:.0f} MB apparent), "
          f"kernel {img.kernel_release}")  # fmt: skip
    return img


@pytest.fixture(scope="module")
def accel() -> str:
    name, why = boot.choose_accel()
    print(f"\naccelerator: {name} ({why})")
    return name


@pytest.fixture(scope="module")
def host(image: VmHostImage, accel: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[boot.VmHost]:
    vm = boot.VmHost(NAME, tmp_path_factory.mktemp("vmhost"), INDEX)
    mtime = image.root.stat().st_mtime_ns
    try:
        vm.start(image, accel)
        print(f"\nVM host {NAME}: boot to SSH {vm.boot_s:.1f} s ({accel}, {boot.VCPUS} vCPUs, {vm.memory_mb} MB)")
        if os.environ.get("HVNET_VM_CONSOLE"):
            print(vm.console_text())
        yield vm
    finally:
        vm.stop()
        assert image.root.stat().st_mtime_ns == mtime, "the cached image was written to"


def test_a_vm_host_that_does_not_come_up_in_time_is_named_with_its_console_and_leaves_nothing(
    image: VmHostImage, accel: str, tmp_path: Path
) -> None:
    vm = boot.VmHost("khlate", tmp_path, INDEX + 1)
    with pytest.raises(LabError, match=r"did not answer over SSH within 3 s; its console ends") as err:
        vm.start(image, accel, timeout=3)
    assert str(err.value).count("\n  ") >= 1  # the console's lines, or that it is empty
    assert vm.leftovers() == []


def test_packages_the_mirror_lacks_are_named_with_exit_4(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """debootstrap for real, with one package Debian does not have: refused before anything is installed."""
    monkeypatch.setattr(vmhost_image, "PACKAGES", (*vmhost_image.PACKAGES, "hvnet-no-such-package"))
    with pytest.raises(PackagesUnavailable, match=r"cannot be fetched from \S+: ") as err:
        vmhost_image._debootstrap(tmp_path / "root", vmhost_image._mirror(), tmp_path / "debootstrap.log")
    assert err.value.message.endswith(": hvnet-no-such-package") and err.value.exit_code == 4
    assert "non-free" in str(err.value.hint)


def test_the_image_comes_from_the_cache_the_second_time(image: VmHostImage) -> None:
    again = build_image()
    assert not again.built and again.digest == image.digest and again.seconds < 10
    assert again.manifest["kernel_release"] and again.manifest["session_tools_absent"] == []
    assert image.root_bytes < 600e6


def test_a_module_its_kernel_lacks_is_refused_by_name_and_leaves_nothing(
    image: VmHostImage, accel: str, tmp_path: Path
) -> None:
    """A host whose kernel cannot load a module the lab needs is refused, naming it and the kernel.

    Boots before the module's host (its own management link), so the two never share the CPU."""
    vm = boot.VmHost("khmods", tmp_path, INDEX + 1, modules=(*boot.MODULES, "hvnet_absent"))
    with pytest.raises(LabError) as refused:
        vm.start(image, accel)
    said = str(refused.value)
    assert "came up without: module hvnet_absent: not loaded" in said, said
    assert f"(kernel {image.kernel_release})" in said, said
    assert vm.leftovers() == []


def test_it_answers_over_ssh_with_the_host_key_the_lab_put_in_and_no_other(host: boot.VmHost) -> None:
    assert host.boot_s < boot.BOOT_TIMEOUT_S
    out = host.ssh("uname -n; uname -r; printf '%s\\n' \"$PATH\"; command -v python3 || echo no-python").stdout
    assert out.splitlines() == [NAME, out.splitlines()[1], "/usr/lib/hvnet/bin", "no-python"]
    assert out.splitlines()[1].endswith("-cloud-amd64")
    pub = (host.dir / "host_key.pub").read_text().split()
    assert host.known_hosts.read_text() == f"{host.link.address} {pub[0]} {pub[1]}\n"
    other = host.dir / "known_hosts.other"  # a key the VM does not hold: strict checking refuses it
    other.write_text(
        f"{host.link.address} {pub[0]} AAAAC3NzaC1lZDI1NTE5AAAAIGeBFSmRJDiSPOtjJ7q3x2Sbu5Qh7qo6DU9hLs4pGrBd\n"
    )
    config = host.dir / "ssh_config.other"
    config.write_text(host.ssh_config.read_text().replace(str(host.known_hosts), str(other)))
    refused = subprocess.run(["ssh", "-F", str(config), "-o", "BatchMode=yes", NAME, "true"], capture_output=True,
                             text=True, timeout=30, check=False)  # fmt: skip
    assert refused.returncode == 255 and "host key" in refused.stderr.lower(), refused.stderr


def test_the_vm_runs_the_modules_and_ovs_on_the_kernel_datapath(host: boot.VmHost) -> None:
    assert host.ssh("cat /run/hvnet/status").stdout == ""
    modules = {line.split()[0] for line in host.ssh("cat /proc/modules").stdout.splitlines()}
    assert {"openvswitch", "act_police", "cls_matchall", "sch_ingress", "sch_htb", "8021q"} <= modules
    host.ssh("ovs-vsctl --may-exist add-br br0")
    dpif = host.ssh("ovs-appctl dpif/show").stdout
    assert "system@ovs-system" in dpif and "br0 65534/" in dpif, dpif
    assert "netdev@" not in dpif
    lost = re.search(r"lost:(\d+)", host.ssh("ovs-appctl dpctl/show").stdout)
    assert lost and lost.group(1) == "0"


def test_ingress_policing_is_a_tc_police_filter_on_the_kernel_path(host: boot.VmHost) -> None:
    host.ssh("ip link add vif1 type veth peer name vif1p && ip link set vif1 up && ip link set vif1p up")
    host.ssh("ovs-vsctl add-port br0 vif1 -- set interface vif1 ingress_policing_rate=10240 "
             "ingress_policing_burst=1024")  # fmt: skip
    shown = host.ssh("tc -s filter show dev vif1 ingress").stdout
    assert "police" in shown and "rate 10240Kbit" in shown, shown
    assert re.search(r"\bmatchall\b|\bbasic\b", shown), shown
    host.ssh("ovs-vsctl set interface vif1 ingress_policing_rate=0")
    assert "police" not in host.ssh("tc -s filter show dev vif1 ingress").stdout
    meminfo = dict(re.findall(r"^(\w+):\s+(\d+) kB", host.ssh("cat /proc/meminfo").stdout, re.M))
    used_mb = (int(meminfo["MemTotal"]) - int(meminfo["MemAvailable"])) / 1024
    print(f"\nVM host memory: {used_mb:.0f} MB in use of {int(meminfo['MemTotal']) / 1024:.0f} MB")
    assert used_mb < host.memory_mb / 2


def test_the_host_killed_mid_apply_is_settled_by_the_next_command_once_it_is_back(
    host: boot.VmHost, image: VmHostImage, accel: str, tmp_path: Path
) -> None:
    """QEMU SIGKILLed after hvnet committed a VLAN change: the apply says it committed and then lost the host;
    the next command says the host is unreachable; once the host is booted again on its disk, the next
    ``rollback`` settles the intent by what the host's OVSDB kept (whether the commit reached the disk is the
    crash's business: hvnet must read it, not assume it) and undoes it when it was applied."""
    short = Path(tempfile.mkdtemp(prefix="khf-", dir="/tmp"))  # an SSH control socket's path has a limit
    env = {"HVNET_SSH_CONFIG": str(host.ssh_config), "HVNET_STATE_DIR": str(tmp_path / "state"),
           "HVNET_AUDIT_LOG": str(tmp_path / "audit.jsonl"), "TMPDIR": str(short)}  # fmt: skip
    policy = tmp_path / "tag.yaml"
    policy.write_text("version: 1\nvifs:\n  - port: vif1\n    vlan: {tag: 20}\n")
    try:
        assert host.ssh("ovs-vsctl get port vif1 tag").stdout.strip() == "[]"
        host.ssh("/usr/bin/sync")  # what the host had before the apply is on its disk, as on a host up for a while
        apply = apply_stopped_at(["--host", NAME, "apply", str(policy)], "committed", env)
        pid = host.qemu_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the host dies between the commit and hvnet reading it back
        while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            time.sleep(0.05)
        os.kill(apply.pid, signal.SIGCONT)
        _out, err = apply.communicate(timeout=120)
        assert apply.returncode == 6 and "Traceback" not in err, err
        assert "the change was committed, then: " + NAME in err, err
        down = run_hvnet("--timeout", "3", "--host", NAME, "status", env=env, timeout=60)
        assert down.returncode == 3 and NAME in down.stderr and "Traceback" not in down.stderr, down.stderr
        again = host.boot_again(image, accel)
        kept = host.ssh("ovs-vsctl get port vif1 tag").stdout.strip()
        print(f"\nbooted again in {again:.1f} s; the crash left the tag {kept}")
        res = run_hvnet("--host", NAME, "rollback", env=env, timeout=120)
        assert "settled an interrupted apply" in res.stderr and "Traceback" not in res.stderr, res.stderr
        if kept == "20":
            assert ": applied (" in res.stderr and res.returncode == 0, res.stdout + res.stderr
        else:
            assert kept == "[]" and ": not applied (" in res.stderr, res.stderr
            assert "committed it, but the switch no longer has the change" in res.stderr, res.stderr
            assert res.returncode == 1 and "nothing to roll back" in res.stderr, res.stderr
        assert host.ssh("ovs-vsctl get port vif1 tag").stdout.strip() == "[]"
        said = [json.loads(line)["result"] for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
        assert said[0].startswith("outcome unknown: committed, then " + NAME), said
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_stopping_it_leaves_no_process_tap_overlay_or_file(host: boot.VmHost) -> None:
    pid = host.qemu_pid()
    assert pid is not None and host.overlay.exists() and Path(f"/sys/class/net/{host.link.tap}").exists()
    host.stop()
    assert host.leftovers() == []
    assert not Path(f"/proc/{pid}").exists() or str(host.dir).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
