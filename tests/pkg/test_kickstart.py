"""Kickstart files: valid for EL9's installer, %post shell clean under shellcheck,
the policy they write accepted by hvnet."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from appliance.policy import load
from tests.conftest import ROOT
from tests.pkg.conftest import run

pytestmark = pytest.mark.pkg

KICKSTARTS = sorted((ROOT / "kickstart").glob("*.ks"))


def ksvalidator() -> str:
    exe = Path(sys.executable).parent / "ksvalidator"
    if exe.exists():
        return str(exe)
    found = shutil.which("ksvalidator")
    if found is None:
        pytest.fail("ksvalidator is not installed (pykickstart, in pyproject's dev extras): run .ci/setup-host")
    return found


def sections(text: str, name: str) -> list[str]:
    """Bodies of every %name section (up to its %end)."""
    return re.findall(rf"^%{name}\b[^\n]*\n(.*?)^%end\s*$", text, re.S | re.M)


def test_there_is_a_kickstart() -> None:
    assert [p.name for p in KICKSTARTS] == ["hvnet-kvm-host.ks"]


@pytest.mark.parametrize("ks", KICKSTARTS, ids=lambda p: p.name)
def test_ksvalidator_accepts_it_for_rhel9(ks: Path) -> None:
    res = run([ksvalidator(), "-v", "RHEL9", str(ks)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "problem" not in (res.stdout + res.stderr).lower() and "deprecated" not in res.stderr.lower()


@pytest.mark.parametrize("ks", KICKSTARTS, ids=lambda p: p.name)
def test_post_scripts_pass_shellcheck(ks: Path, tmp_path: Path) -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: run .ci/setup-host")
    text = ks.read_text(encoding="utf-8")
    posts = sections(text, "post")
    assert posts, f"{ks.name} has no %post"
    scripts = list(posts)
    # scripts %post writes out (heredocs named *_SH) are shell too
    for post in posts:
        scripts += re.findall(r"<<'(\w+_SH)'\n(.*?)^\1$", post, re.S | re.M)
    checked = 0
    for i, script in enumerate(scripts):
        body = script[1] if isinstance(script, tuple) else script
        f = tmp_path / f"script{i}.sh"
        f.write_text("#!/bin/bash\n" + body)
        res = run(["shellcheck", "-s", "bash", str(f)])
        assert res.returncode == 0, f"{ks.name} script {i}:\n{res.stdout}"
        checked += 1
    assert checked >= 2, "expected %post and the first-boot script"


def test_site_settings_are_one_place_each() -> None:
    text = (ROOT / "kickstart" / "hvnet-kvm-host.ks").read_text(encoding="utf-8")
    assert len(re.findall(r"^repo --name=nfv-openvswitch --baseurl=\S+ --install$", text, re.M)) == 1
    assert len(re.findall(r"^repo --name=hvnet --baseurl=\S+ --install$", text, re.M)) == 1
    post = sections(text, "post")[0]
    settings = post.split("set -euo pipefail")[0]  # the marked block at the top of %post
    assert "SITE SETTINGS" in settings
    for var in ("UPLINK", "BRIDGE", "LIBVIRT_NETWORK", "DEFAULT_VLAN"):
        assert len(re.findall(rf"^{var}=", settings, re.M)) == 1, var
    assert "<virtualport type='openvswitch'/>" in post
    assert "systemctl enable" in post and "hvnet-agent.service" in post and "openvswitch.service" in post
    assert re.search(r"^%post --log=/root/hvnet-ks-post\.log", text, re.M)
    assert "/var/log/hvnet/firstboot.log" in post


def test_policies_written_by_the_kickstart_and_the_rpm_load(tmp_path: Path) -> None:
    text = (ROOT / "kickstart" / "hvnet-kvm-host.ks").read_text(encoding="utf-8")
    m = re.search(r"cat >/etc/hvnet/policy\.yaml <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    assert m
    ks_policy = tmp_path / "policy.yaml"
    ks_policy.write_text(m.group(1) + "\n")
    for path in (ks_policy, ROOT / "rpm" / "policy.yaml"):
        policy = load(str(path))
        assert policy.vifs == [] and not policy.bridges, f"{path}: a default policy must change nothing"


def test_only_the_named_disks_are_cleared() -> None:
    text = (ROOT / "kickstart" / "hvnet-kvm-host.ks").read_text(encoding="utf-8")
    installer = text.split("%packages")[0]
    assert re.search(r"^ignoredisk --only-use=\S+$", installer, re.M), "clearpart --all would erase every disk"
    clearpart = re.search(r"^clearpart --all\b", installer, re.M)
    assert clearpart and installer.index("\nignoredisk --only-use=") < clearpart.start()


def test_the_installed_policy_is_kept_and_one_is_written_only_when_none_is(tmp_path: Path) -> None:
    """The policy block of %post, run with /etc/hvnet moved to a scratch directory."""
    post = sections((ROOT / "kickstart" / "hvnet-kvm-host.ks").read_text(encoding="utf-8"), "post")[0]
    m = re.search(r"^if \[ -e /etc/hvnet/policy\.yaml \]; then\n.*?^fi\n", post, re.S | re.M)
    assert m, "%post writes the policy only when none is installed"
    etc = tmp_path / "etc-hvnet"
    etc.mkdir()
    block = tmp_path / "block.sh"
    block.write_text(m.group(0).replace("/etc/hvnet", str(etc)))
    res = run(["bash", "-euo", "pipefail", str(block)])
    assert res.returncode == 0 and "wrote" in res.stdout, res.stdout + res.stderr
    assert load(str(etc / "policy.yaml")).vifs == []
    (etc / "policy.yaml").write_text("version: 1\nvifs: [{port: vif1.0, vlan: {tag: 5}}]\n")  # the operator's
    res = run(["bash", "-euo", "pipefail", str(block)])
    assert res.returncode == 0 and "kept the installed" in res.stdout, res.stdout + res.stderr
    assert "tag: 5" in (etc / "policy.yaml").read_text()


def test_hvnet_repository_is_checked_with_the_shipped_key() -> None:
    post = sections((ROOT / "kickstart" / "hvnet-kvm-host.ks").read_text(encoding="utf-8"), "post")[0]
    for line in ("gpgcheck=1", "repo_gpgcheck=1", "gpgkey=file://$hvnet_key"):
        assert f"\n{line}\n" in post, line
    assert "hvnet_key=/etc/pki/rpm-gpg/RPM-GPG-KEY-hvnet" in post and 'rpm --import "$hvnet_key"' in post
    assert "%{RSAHEADER:pgpsig}" in post, "the installed packages' signatures are checked"
