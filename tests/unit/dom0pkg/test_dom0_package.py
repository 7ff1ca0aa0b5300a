"""The dom0 package's own files: its spec, its launcher and its agent unit.

The package itself is built by 'make rpm-dom0' and tried in tests/pkg/test_dom0_installed.py;
these check, without building, what dom0's rpm 4.11 and systemd 219 would refuse.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from appliance import __version__
from tests.conftest import ROOT

DOM0 = ROOT / "rpm" / "dom0"
SPEC = (DOM0 / "hvnet-dom0.spec").read_text(encoding="utf-8")

# The [Service] settings the EL9 unit uses that came after CentOS 7's systemd 219 (with the
# release that brought each): 219 ignores them with a warning, so the dom0 unit must not
# rely on them.
AFTER_219 = {
    "StateDirectory": 235, "LogsDirectory": 235, "CacheDirectory": 235, "RuntimeDirectoryPreserve": 235,
    "StateDirectoryMode": 235, "LogsDirectoryMode": 235, "RuntimeDirectoryMode": 235,
    "ProtectKernelTunables": 232, "ProtectKernelModules": 232, "ProtectControlGroups": 232,
    "ProtectKernelLogs": 244, "ProtectClock": 245, "ProtectHostname": 242, "PrivateMounts": 239,
    "RestrictNamespaces": 233, "RestrictRealtime": 231, "RestrictSUIDSGID": 242, "LockPersonality": 235,
    "MemoryDenyWriteExecute": 231, "ProtectProc": 247,
}  # fmt: skip


def settings(unit: str) -> list[tuple[str, str]]:
    return re.findall(r"^(\w+)=(.*)$", unit, re.M)


def test_the_spec_is_what_rpm_411_reads() -> None:
    assert re.search(r"^%global _binary_payload w9\.xzdio$", SPEC, re.M)
    requires = re.findall(r"^Requires:\s*(.+)$", SPEC, re.M)
    assert requires and not [r for r in requires if "(" in r or " or " in r], "boolean dependencies need rpm 4.13"
    assert {r.split()[0] for r in requires} == {"glibc", "openvswitch", "iproute", "openssh-clients", "systemd"}
    assert re.search(r"^AutoReqProv:\s*no$", SPEC, re.M), "the runtime's own libraries must not become Requires"
    assert re.search(r"^Version:\s*(\S+)$", SPEC, re.M).group(1) == __version__  # type: ignore[union-attr]


def test_the_dom0_unit_uses_only_what_systemd_219_knows() -> None:
    unit = (DOM0 / "units" / "hvnet-agent.service").read_text(encoding="utf-8")
    used = settings(unit)
    newer = [k for k, _ in used if AFTER_219.get(k, 0) > 219]
    assert not newer, newer
    assert not [v for k, v in used if k.startswith("Exec") and v.startswith(("+", "!"))], "prefixes came in 231"
    assert ("ProtectSystem", "full") in used  # 'strict' came in 232
    el9 = dict(settings((ROOT / "rpm" / "hvnet-agent.service").read_text(encoding="utf-8")))
    assert el9["ExecStart"] == dict(used)["ExecStart"], "the same agent command as the EL9 unit"
    # the check above is not empty: the EL9 unit uses settings dom0's systemd lacks
    assert [k for k in el9 if AFTER_219.get(k, 0) > 219]


def test_the_launcher_runs_the_prefix_next_to_it(tmp_path: Path) -> None:
    """A scratch root with the launcher and a stand-in python3 that prints its arguments."""
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    launcher = tmp_path / "usr" / "bin" / "hvnet"
    launcher.write_bytes((DOM0 / "hvnet.launcher").read_bytes())
    launcher.chmod(0o755)
    res = subprocess.run([str(launcher), "status"], capture_output=True, text=True, check=False)
    assert res.returncode == 4 and "installation is incomplete" in res.stderr
    python = tmp_path / "opt" / "hvnet" / "python" / "bin" / "python3"
    python.parent.mkdir(parents=True)
    python.write_text('#!/bin/sh\nprintf "%s|" "$0" "$@"\n')
    python.chmod(0o755)
    link = tmp_path / "hvnet-link"
    os.symlink(launcher, link)  # reached through a symbolic link, as /usr/local/bin/hvnet might be
    for argv0 in (launcher, link):
        res = subprocess.run([str(argv0), "status", "--json", "a b"], capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr
        exe, *args = res.stdout.rstrip("|").split("|")
        assert Path(exe).resolve() == python and args == ["-I", "-m", "appliance", "status", "--json", "a b"]


def test_the_build_scripts_parse() -> None:
    for script in ("build-runtime", "build-rpm"):
        res = subprocess.run(["bash", "-n", str(DOM0 / script)], capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stderr
        assert os.access(DOM0 / script, os.X_OK)
