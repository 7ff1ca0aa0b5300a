"""Files that choose what hvnet does as root (hvnet.conf, the host inventory, the XAPI credentials, the
agent's policy) are refused when another user could have written them, with real files, owners and modes:
the file, its directory, the directories above, a symlink in its place, all checked on what was opened."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.core import config, trusted
from appliance.core import hostlist as hosts
from appliance.core.errors import ConfigError, UsageError
from appliance.frontdoor import hosts as frontdoor
from appliance.policy.plan import document

ROOT = Path(__file__).resolve().parents[3]
OTHER_UID = 65534  # nobody
INVENTORY = "hosts:\n  - name: xs01\n    address: 192.0.2.11\n"
POLICY = "version: 1\nvifs:\n  - port: vif1.0\n    vlan: {mode: access, tag: 5}\n"


@pytest.fixture(autouse=True)
def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("these tests chown files to another user: they need root")


def _dir(tmp_path: Path) -> Path:
    d = tmp_path / "etc"
    d.mkdir(mode=0o755)
    return d


def _file(d: Path, name: str, text: str) -> Path:
    f = d / name
    f.write_text(text)
    f.chmod(0o644)
    return f


# Each reader of such a file, and the refusal it gives (a UsageError: exit 2 through the CLI).
READERS: dict[str, tuple[str, Callable[[Path], object]]] = {
    "hvnet.conf": ("[target]\ndb = unix:/a.sock\n", lambda p: config.load({"HVNET_CONFIG": str(p)})),
    "hosts.yaml": (INVENTORY, hosts.load),
    "policy.yaml": (POLICY, lambda p: document.load(p, trusted="the policy the agent enforces")),
    "xapi-credentials": ("root:secret\n", lambda p: trusted.read(p, "the XAPI credentials")),
}


@pytest.fixture(params=sorted(READERS))
def reader(request: pytest.FixtureRequest) -> tuple[str, str, Callable[[Path], object]]:
    name = request.param
    return name, *READERS[name]


def _refused(read: Callable[[Path], object], path: Path, why: str) -> str:
    with pytest.raises(UsageError) as exc:
        read(path)
    assert not isinstance(exc.value, ConfigError) or "refusing" in str(exc.value)
    text = str(exc.value)
    assert str(path) in text and why in text, text
    assert "must be owned by root and writable by no one else" in text, text
    return text


def test_a_file_as_it_should_be_is_read(tmp_path: Path, reader) -> None:
    name, text, read = reader
    assert read(_file(_dir(tmp_path), name, text)) is not None


def test_a_file_owned_by_another_user_is_refused(tmp_path: Path, reader) -> None:
    name, text, read = reader
    f = _file(_dir(tmp_path), name, text)
    os.chown(f, OTHER_UID, -1)
    _refused(read, f, f"owned by uid {OTHER_UID} with mode 644")


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_file_others_can_write_is_refused(tmp_path: Path, reader, mode: int) -> None:
    name, text, read = reader
    f = _file(_dir(tmp_path), name, text)
    f.chmod(mode)
    text = _refused(read, f, f"owned by uid 0 with mode {mode:o}")
    assert f"chmod go-w {f}" in text


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_directory_others_can_write_is_refused(tmp_path: Path, reader, mode: int) -> None:
    name, text, read = reader
    d = _dir(tmp_path)
    f = _file(d, name, text)
    d.chmod(mode)
    _refused(read, f, f"its directory {d} is owned by uid 0 with mode {mode:o}")


def test_a_directory_of_another_user_is_refused(tmp_path: Path, reader) -> None:
    name, text, read = reader
    d = _dir(tmp_path)
    f = _file(d, name, text)
    os.chown(d, OTHER_UID, -1)
    _refused(read, f, f"its directory {d} is owned by uid {OTHER_UID}")


def test_a_directory_above_that_others_can_write_is_refused(tmp_path: Path, reader) -> None:
    """Whoever can rename ``etc`` out of a world-writable parent can put a directory of their own there."""
    name, text, read = reader
    top = tmp_path / "shared"
    top.mkdir()
    d = _dir(top)
    f = _file(d, name, text)
    top.chmod(0o777)
    _refused(read, f, f"its directory {top} is owned by uid 0 with mode 777")
    top.chmod(0o1777)  # sticky, like /tmp: only an entry's owner (root here) can rename it
    assert read(f) is not None


def test_a_symlink_in_the_files_place_is_not_followed(tmp_path: Path, reader) -> None:
    """The link points at a file that passes every check: the old check stat()-ed through the link and
    read it; the link itself is what another user could have put there."""
    name, text, read = reader
    d = _dir(tmp_path)
    real = _file(d, "real-" + name, text)
    link = d / name
    link.symlink_to(real)
    _refused(read, link, "is a symbolic link")


def test_what_is_read_is_what_was_checked(tmp_path: Path) -> None:
    """The descriptor checked is the one read: a file swapped in by name afterwards is not what hvnet reads."""
    d = _dir(tmp_path)
    f = _file(d, "hosts.yaml", INVENTORY)
    fd, st = trusted.open_checked(f, "the host inventory")
    try:
        planted = _file(d, "planted", "hosts: []\n")
        os.chown(planted, OTHER_UID, -1)
        os.replace(planted, f)  # what a stat-then-open reader would now open
        assert os.fstat(fd).st_ino == st.st_ino and os.fstat(fd).st_uid == 0
        with os.fdopen(os.dup(fd), "rb") as fh:
            assert fh.read().decode() == INVENTORY
    finally:
        os.close(fd)
    with pytest.raises(UsageError, match=f"owned by uid {OTHER_UID}"):
        hosts.load(f)


def test_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    d = _dir(tmp_path)
    os.mkfifo(d / "hosts.yaml", 0o644)
    with pytest.raises(UsageError, match="not a regular file"):
        hosts.load(d / "hosts.yaml")


def test_the_xapi_credentials_are_checked_before_anything_is_asked(tmp_path: Path) -> None:
    d = _dir(tmp_path)
    creds = _file(d, "xapi", "root:secret\n")
    env = {"HVNET_XAPI_URL": "https://192.0.2.10", "HVNET_XAPI_CREDENTIALS": str(creds)}
    frontdoor.check_xapi(env, "HVNET_XAPI_URL")
    creds.chmod(0o666)
    with pytest.raises(UsageError, match="the XAPI credentials must be owned by root"):
        frontdoor.check_xapi(env, "HVNET_XAPI_URL")


# -- through the CLI: exit 2, the file named, no traceback, nothing contacted ------------


def _hvnet(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HVNET_LAB_DIR": "/nonexistent/lab", **env}
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, cwd=ROOT,
                          env=full, timeout=60, check=False)  # fmt: skip


def _exit_2(res: subprocess.CompletedProcess[str], path: Path, why: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert str(path) in res.stderr and why in res.stderr, res.stderr
    assert "writable by no one else" in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_world_writable_inventory_naming_shadow_is_refused_by_the_cli(tmp_path: Path) -> None:
    """The review's case: an inventory anyone can edit, pointing xapi_credentials at /etc/shadow."""
    d = _dir(tmp_path)
    inv = _file(d, "hosts.yaml", "hosts:\n  - name: xs01\n    address: 127.0.0.1\n    port: 9\n"
                "    xapi_url: https://127.0.0.1:9\n    xapi_credentials: /etc/shadow\n")  # fmt: skip
    inv.chmod(0o666)
    env = {"HVNET_INVENTORY": str(inv)}
    _exit_2(_hvnet("hosts", env=env), inv, "mode 666")
    _exit_2(_hvnet("--host", "xs01", "status", env=env), inv, "mode 666")


def test_untrusted_xapi_credentials_are_refused_by_the_cli(tmp_path: Path) -> None:
    d = _dir(tmp_path)
    creds = _file(d, "xapi", "root:secret\n")
    os.chown(creds, OTHER_UID, -1)
    env = {"HVNET_XAPI_URL": "https://127.0.0.1:9", "HVNET_XAPI_CREDENTIALS": str(creds)}
    _exit_2(_hvnet("--db", f"unix:{tmp_path}/none.sock", "status", env=env), creds, f"uid {OTHER_UID}")


def test_the_agent_refuses_a_world_writable_policy_before_connecting(tmp_path: Path) -> None:
    d = _dir(tmp_path)
    policy = _file(d, "policy.yaml", POLICY)
    policy.chmod(0o666)
    res = _hvnet("--db", f"unix:{tmp_path}/none.sock", "agent", "--policy", str(policy), env={})
    _exit_2(res, policy, "the policy the agent enforces must be owned by root")
    link = d / "link.yaml"
    policy.chmod(0o644)
    link.symlink_to(policy)
    _exit_2(_hvnet("--db", f"unix:{tmp_path}/none.sock", "agent", "--policy", str(link), env={}), link, "symbolic link")


def test_an_absent_file_is_absent_whatever_its_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default hvnet.conf may be absent (built-in defaults), even in a directory that would be refused."""
    d = _dir(tmp_path)
    d.chmod(0o777)
    monkeypatch.setattr(config, "DEFAULT_FILE", d / "hvnet.conf")
    assert config.load({}).path is None
    with pytest.raises(FileNotFoundError):
        trusted.open_checked(d / "hosts.yaml", "the host inventory")
