"""The dom0 package installed into a scratch root and run against the lab: hvnet on its own
CPython (built for glibc 2.17), as a XenServer 8 / XCP-ng 8.x dom0 would run it.

'make rpm-dom0' builds the package (rpm/dom0/build-rpm: ~10 minutes the first time, too
slow for 'make test' in CI), so these tests take the RPM it left in build/rpms and skip,
saying so, when there is none.  The RPM must be of this tree's version.  Nothing here
proves glibc 2.17 itself (this host's glibc is newer): the payload's ELF check does that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance import __version__
from appliance.lab import Lab
from tests.conftest import ROOT
from tests.pkg.conftest import run
from tests.pkg.test_installed import agent_applies_and_reloads, port_tag, wait_for

pytestmark = [pytest.mark.pkg]

RPM_DIR = ROOT / "build" / "rpms"
_found = sorted(RPM_DIR.glob("hvnet-dom0-*.x86_64.rpm"), key=lambda p: p.stat().st_mtime)
if not _found:
    pytest.skip(
        f"no hvnet-dom0 RPM in {RPM_DIR}: build it with 'make rpm-dom0' (about 10 minutes the first time,"
        " so not part of 'make test'), then run this module",
        allow_module_level=True,
    )
RPM = _found[-1]
RUNTIME = ("opt", "hvnet", "python", "bin", "python3")

# The console through Textual's Pilot, run by the installed runtime's own Python: the VIF
# table fills from the lab's switch (what 'hvnet tui' shows first); prints the rows' ports.
TUI_SMOKE = """
import asyncio, sys
from appliance.frontdoor.hosts import build_host
from appliance.switch import api
from tui.app import HvnetApp
from tui.widgets.vif_table import VifTable

async def main(want):
    app = HvnetApp(api.connect(build_host(), sync=False))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(600):
            tables = app.screen.query(VifTable)
            if tables and tables.first().row_count >= want:
                await pilot.pause()
                table = tables.first()
                print(" ".join(str(table.get_row_at(i)[1]) for i in range(table.row_count)))  # VM, Port, ...
                return
            await asyncio.sleep(0.05)
    sys.exit("the VIF table never filled")

asyncio.run(main(int(sys.argv[1])))
"""


@pytest.fixture(scope="module")
def dom0_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The RPM installed with 'rpm --root' (no dependencies: dom0's come from this host; no
    scriptlets: systemctl in a chroot without systemd)."""
    root = tmp_path_factory.mktemp("dom0-root")
    res = run(["rpm", "--root", str(root), "--nodeps", "--noscripts", "-i", str(RPM)])
    assert res.returncode == 0, res.stdout + res.stderr
    yield root
    shutil.rmtree(root, ignore_errors=True)


def hvnet(root: Path, *args: str, timeout: float = 60, **kw: object) -> subprocess.CompletedProcess:
    return run([str(root / "usr" / "bin" / "hvnet"), *args], timeout=timeout, **kw)


def payload_files(root: Path) -> set[str]:
    """Every file and directory under /opt/hvnet, as paths inside the root."""
    prefix = root / "opt" / "hvnet"
    return {"/" + str(p.relative_to(root)) for p in prefix.rglob("*")} | {"/opt/hvnet"}


def packaged_files() -> set[str]:
    """What the RPM installs under /opt/hvnet (files and directories)."""
    res = run(["rpm", "-qlp", str(RPM)])
    assert res.returncode == 0, res.stderr
    return {line for line in res.stdout.splitlines() if line == "/opt/hvnet" or line.startswith("/opt/hvnet/")}


def test_the_package_is_of_this_tree() -> None:
    res = run(["rpm", "-qp", "--qf", "%{NAME} %{VERSION}", str(RPM)])
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"hvnet-dom0 {__version__}", f"{RPM.name} is stale: rebuild it with 'make rpm-dom0'"


def test_dom0s_rpm_can_read_the_package() -> None:
    res = run([sys.executable, str(ROOT / "rpm" / "dom0" / "rpmcheck.py"), "--json", str(RPM)])
    assert res.returncode == 0, res.stdout + res.stderr
    (report,) = json.loads(res.stdout)
    assert report["compressor"] == "xz" and not report["problems"]
    assert not any(r.startswith("rpmlib(PayloadIsZstd") or " or " in r for r in report["requires"])


def test_every_installed_binary_fits_glibc_2_17(dom0_root: Path) -> None:
    res = run([sys.executable, str(ROOT / "rpm" / "dom0" / "elfcheck.py"), "--json", str(dom0_root)])
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert not doc["problems"], doc["problems"]
    assert doc["files"] >= 50, "the interpreter, its extension modules, psutil's and PyYAML's"


def test_the_runtime_is_its_own_python(dom0_root: Path) -> None:
    python = dom0_root.joinpath(*RUNTIME)
    code = (
        "import sys, ssl, ctypes, zlib, _asyncio, pyexpat, termios, yaml, psutil, ovs.db.idl, textual;"
        "print(sys.version_info[:2], sys.prefix, ssl.OPENSSL_VERSION, yaml.__with_libyaml__)"
    )
    res = run([str(python), "-I", "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHOME": "/nowhere"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"(3, 11) {dom0_root}/opt/hvnet/python OpenSSL 3.0"), res.stdout
    assert res.stdout.strip().endswith("True"), "PyYAML's C loader (its manylinux2014 wheel)"


def test_the_launcher_runs_the_packaged_hvnet(dom0_root: Path) -> None:
    res = hvnet(dom0_root, "--version")
    assert res.returncode == 0 and res.stdout.strip() == f"hvnet {__version__}", res.stdout + res.stderr
    conf = dom0_root / "etc" / "hvnet" / "hvnet.conf"
    res = hvnet(dom0_root, "--no-lab", "config", "show", "--json", env={**os.environ, "HVNET_CONFIG": str(conf)})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["file_present"]
    res = run([str(dom0_root.joinpath(*RUNTIME)), "-I", "-c", "import appliance; print(appliance.__file__)"])
    assert res.stdout.strip() == f"{dom0_root}/opt/hvnet/app/appliance/__init__.py", res.stdout + res.stderr


IMPORT_ALL = """
import importlib, pkgutil, appliance, tui
names = [m.name for pkg in (appliance, tui) for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + ".")]
for name in names:
    if name != "appliance.__main__":  # runs the CLI
        try:
            importlib.import_module(name)
        except Exception as e:
            print("FAILED", name, type(e).__name__, e)
print(len(names), "modules")
"""


def test_every_hvnet_module_imports_in_the_runtime(dom0_root: Path) -> None:
    """The whole of hvnet (the lab's modules too: 'hvnet lab' needs lzma) against the modules
    the runtime was built with: a module it lacks fails here, not in dom0."""
    res = run([str(dom0_root.joinpath(*RUNTIME)), "-I", "-c", IMPORT_ALL], timeout=300)
    assert res.returncode == 0, res.stderr
    assert "FAILED" not in res.stdout, res.stdout
    assert int(res.stdout.split()[-2]) > 250, res.stdout


@pytest.mark.lab
def test_installed_hvnet_sees_the_lab(lab: Lab, dom0_root: Path) -> None:
    res = hvnet(dom0_root, "status", "--json")
    assert res.returncode == 0, res.stderr
    vifs = {v["port"]: v for v in json.loads(res.stdout)["vifs"]}
    assert {"vif1.0", "vif2.0", "vif3.0"} <= set(vifs)
    assert vifs["vif1.0"]["vm_name"] == "VM1" and vifs["vif1.0"]["tag"] == 1


@pytest.mark.lab
def test_installed_console_shows_the_lab(lab: Lab, dom0_root: Path) -> None:
    res = run([str(dom0_root.joinpath(*RUNTIME)), "-I", "-c", TUI_SMOKE, "3"], timeout=90)
    assert res.returncode == 0, res.stdout + res.stderr
    assert {"vif1.0", "vif2.0", "vif3.0"} <= set(res.stdout.split()), res.stdout


@pytest.mark.lab
def test_installed_console_starts_in_a_terminal(lab: Lab, dom0_root: Path) -> None:
    """'hvnet tui' on a real pseudo-terminal (termios, the Linux driver): it draws the lab's
    VIFs and quits on 'q'."""
    import fcntl
    import pty
    import select
    import struct
    import termios
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: the launcher on a 120x40 terminal
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.environ["TERM"] = "xterm-256color"
        try:
            os.execv(str(dom0_root / "usr" / "bin" / "hvnet"), ["hvnet", "tui"])
        finally:
            os._exit(127)
    seen = b""
    try:
        end = time.monotonic() + 60
        while b"vif3.0" not in seen and time.monotonic() < end:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:
                    break
        assert b"vif3.0" in seen, seen[-2000:]
        os.write(fd, b"q")
        end = time.monotonic() + 20
        status = None
        while status is None and time.monotonic() < end:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    os.read(fd, 65536)
                except OSError:
                    pass
            done, st = os.waitpid(pid, os.WNOHANG)
            status = st if done else None
        assert status is not None and os.waitstatus_to_exitcode(status) == 0, "hvnet tui did not quit on 'q'"
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


@pytest.mark.lab
def test_installed_agent_applies_and_reloads_a_policy(lab: Lab, dom0_root: Path, tmp_path: Path) -> None:
    agent_applies_and_reloads(lab, dom0_root / "usr" / "bin" / "hvnet", tmp_path)


@pytest.mark.lab
def test_installed_rollback_watcher_finds_the_runtime_and_writes_nothing_there(
    lab: Lab, dom0_root: Path, tmp_path: Path
) -> None:
    """'apply --no-commit' starts its watcher as 'sys.executable -m appliance': the runtime's
    Python must find hvnet by itself (the .pth file), and nothing is written under /opt/hvnet
    (the bytecode ships in the package): after this module's runs, /opt/hvnet holds exactly
    what the RPM installed."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nvifs:\n  - port: vif3.0\n    vlan: {mode: access, tag: 9}\n")
    assert port_tag(lab, "vif3.0") == "2"
    res = hvnet(dom0_root, "apply", "--no-commit", "--timeout", "5", str(policy))
    assert res.returncode == 0, res.stdout + res.stderr
    assert port_tag(lab, "vif3.0") == "9"
    assert wait_for(lambda: port_tag(lab, "vif3.0") == "2", 30), "the installed rollback watcher did not roll back"
    assert payload_files(dom0_root) == packaged_files(), sorted(payload_files(dom0_root) ^ packaged_files())[:20]
