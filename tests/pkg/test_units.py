"""The installed systemd unit, tmpfiles and logrotate configuration, checked by their own tools.

systemd is not PID 1 here, but 'systemd-analyze verify' checks a unit file
offline.  It needs ExecStart's program to exist, so the installed unit is
verified with its /usr/bin/hvnet pointing into the scratch root; every other
line is the packaged one.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.pkg.conftest import run

pytestmark = pytest.mark.pkg


def test_agent_unit_verifies(installed_root: Path, tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is not installed (Debian: systemd)")
    unit = (installed_root / "usr/lib/systemd/system/hvnet-agent.service").read_text()
    assert "ExecStart=/usr/bin/hvnet --no-lab agent\n" in unit  # the policy file: hvnet.conf's [agent] policy
    assert "ExecReload=/bin/kill -HUP $MAINPID" in unit
    assert "Restart=on-failure" in unit and "After=" in unit and "openvswitch.service" in unit
    assert "Type=notify" in unit and "WatchdogSec=" in unit
    assert "ExecStartPre=+/usr/bin/hvnet --no-lab agent --prepare" in unit
    copy = tmp_path / "hvnet-agent.service"
    copy.write_text(unit.replace("/usr/bin/hvnet", str(installed_root / "usr/bin/hvnet")))
    res = run(["systemd-analyze", "verify", "--man=no", str(copy)])
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), res.stdout + res.stderr


def test_agent_unit_is_sandboxed(installed_root: Path, tmp_path: Path) -> None:
    """systemd's own exposure score (0 safest, 10 least): 9.0 with the unit of 0.1.0-1, 2.4 now."""
    unit = (installed_root / "usr/lib/systemd/system/hvnet-agent.service").read_text()
    for line in ("ProtectSystem=strict", "SystemCallFilter=@system-service", "UMask=0077",
                 "CapabilityBoundingSet=CAP_DAC_OVERRIDE CAP_NET_ADMIN", "NoNewPrivileges=yes"):  # fmt: skip
        assert f"\n{line}\n" in unit, line
    copy = tmp_path / "hvnet-agent.service"
    copy.write_text(unit.replace("/usr/bin/hvnet", str(installed_root / "usr/bin/hvnet")))
    res = run(["systemd-analyze", "security", "--offline=true", "--no-pager", "--threshold=25", str(copy)])
    score = re.search(r"Overall exposure level for \S+: (\d+\.\d)", res.stdout + res.stderr)
    assert score, res.stdout + res.stderr
    assert res.returncode == 0 and float(score.group(1)) <= 2.5, res.stdout[-3000:]


def test_exporter_unit_verifies_and_is_hardened(installed_root: Path, tmp_path: Path) -> None:
    unit = (installed_root / "usr/lib/systemd/system/hvnet-exporter.service").read_text()
    assert "ExecStart=/usr/bin/hvnet --no-lab exporter" in unit
    assert "Environment=" not in unit  # hvnet.conf decides: a variable here would outrank the file, silently
    assert "RestartPreventExitStatus=2" in unit and "ProtectSystem=strict" in unit
    copy = tmp_path / "hvnet-exporter.service"
    copy.write_text(unit.replace("/usr/bin/hvnet", str(installed_root / "usr/bin/hvnet")))
    res = run(["systemd-analyze", "verify", "--man=no", str(copy)])
    assert res.returncode == 0 and not (res.stdout + res.stderr).strip(), res.stdout + res.stderr
    res = run(["systemd-analyze", "security", "--offline=yes", "--threshold=60", str(copy)])
    assert res.returncode == 0, res.stdout + res.stderr  # exposure 5.4 when written; 6.0 fails


def test_tmpfiles_create_the_directories(installed_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    res = run(["systemd-tmpfiles", f"--root={root}", "--create", str(installed_root / "usr/lib/tmpfiles.d/hvnet.conf")])
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr
    assert oct((root / "var/log/hvnet").stat().st_mode & 0o777) == "0o750"
    assert oct((root / "var/lib/hvnet").stat().st_mode & 0o777) == "0o700"  # runs and pcaps: root's alone
    assert (root / "var/cache/hvnet").is_dir()


def test_logrotate_configuration_parses(installed_root: Path, tmp_path: Path) -> None:
    if shutil.which("logrotate") is None and not Path("/usr/sbin/logrotate").exists():
        pytest.fail("logrotate is not installed: run .ci/setup-host")
    conf = installed_root / "etc/logrotate.d/hvnet"
    res = run(["logrotate", "--debug", "--state", str(tmp_path / "state"), str(conf)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "error" not in res.stderr.lower(), res.stderr
    assert "/var/log/hvnet/audit.jsonl" in res.stderr, res.stderr


def test_an_invalid_policy_stops_the_agent_with_the_status_the_unit_does_not_restart(
    installed_root: Path, tmp_path: Path
) -> None:
    unit = (installed_root / "usr/lib/systemd/system/hvnet-agent.service").read_text()
    assert "RestartPreventExitStatus=2" in unit
    bad = tmp_path / "policy.yaml"
    bad.write_text("version: 2\nvifs: {}\n")
    res = run([str(installed_root / "usr/bin/hvnet"), "agent", "--policy", str(bad)])
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"{bad}:1: version" in res.stderr, res.stderr
