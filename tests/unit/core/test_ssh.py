"""SSH targets and remote command lines: pure parsing and quoting (the real sshd is in tests/lab/test_remote.py)."""

from __future__ import annotations

import shlex
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.errors import UsageError
from appliance.core.ssh import SshOptions, SshSession, SshTarget, accept_hint, key_lines, remote_command


@pytest.mark.parametrize(
    ("text", "name", "user", "port"),
    [
        ("hv2", "hv2", None, None),
        ("root@hv2.example.org", "hv2.example.org", "root", None),
        ("admin@10.0.0.7:2222", "10.0.0.7", "admin", 2222),
        ("[fe80::1]:22", "[fe80::1]", None, 22),
    ],
)
def test_targets(text: str, name: str, user: str | None, port: int | None) -> None:
    t = SshTarget.parse(text)
    assert (t.name, t.user, t.port) == (name, user, port)


@pytest.mark.parametrize("text", ["-oProxyCommand=x", "a b", "h:0", "h:99999", "h:2x", "u;x@h", "", "h$(id)", "@h"])
def test_bad_targets_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        SshTarget.parse(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=40), min_size=1, max_size=6))
def test_every_argument_survives_the_remote_shell(args: list[str]) -> None:
    """What sh makes of the command line is exactly the argument list (run by a real sh here)."""
    args = [a.replace("\0", "") for a in args]
    line = remote_command(["printf", "%s\\0", *args])
    out = subprocess.run(["sh", "-c", line], capture_output=True, timeout=10, check=True).stdout
    assert out.split(b"\0")[:-1] == [a.encode("utf-8", "surrogateescape") for a in args]


def test_environment_names_are_checked_and_values_quoted() -> None:
    assert shlex.split(remote_command(["ovs-ofctl", "show"], {"OVS_RUNDIR": "/r d"})) == [
        "env", "OVS_RUNDIR=/r d", "ovs-ofctl", "show"]  # fmt: skip
    with pytest.raises(ValueError):
        remote_command(["true"], {"A;B": "x"})


def test_session_argv_keeps_strict_host_keys_and_batch_mode(tmp_path) -> None:
    session = SshSession(SshTarget.parse("admin@hv9:2200"), SshOptions(known_hosts=tmp_path / "kh"))
    try:
        argv = session.command(["ovs-vsctl", "show"])
        joined = " ".join(argv)
        assert "StrictHostKeyChecking=yes" in joined and "BatchMode=yes" in joined and "-p 2200" in joined
        assert argv[-2:] == ["admin@hv9", "ovs-vsctl show"] and argv[-3] == "--"
        assert (session.work_dir.stat().st_mode & 0o077) == 0
    finally:
        session.close()


def test_the_host_key_hint_gives_the_scanned_lines_not_another_scan(tmp_path) -> None:
    """From real host keys (ssh-keygen): the hint adds exactly the lines whose fingerprints were shown, and
    known_hosts with them appended knows the host; it never says to run ssh-keyscan again (a second scan
    could be answered by another key than the one the operator compared)."""
    pubs = []
    for kind in ("ed25519", "rsa"):
        key = tmp_path / f"ssh_host_{kind}_key"
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(key)], check=True, timeout=60)
        pubs.append(key.with_suffix(".pub").read_text().split())
    scan = "# 192.0.2.7:2222 SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\n" + "".join(
        f"[192.0.2.7]:2222 {kind} {blob}\n" for kind, blob, *_ in pubs
    )
    lines = key_lines(scan)
    assert lines == [f"[192.0.2.7]:2222 {kind} {blob}" for kind, blob, *_ in pubs]
    known = tmp_path / "known_hosts"
    hint = accept_hint(False, "192.0.2.7", 2222, str(known), lines)
    assert "ssh-keyscan" not in hint and all(f"\n    {line}" in hint for line in lines)
    shown = [h.strip() for h in hint.split(f"to {known}:\n", 1)[1].splitlines()]
    known.write_text("".join(f"{line}\n" for line in shown))
    found = subprocess.run(["ssh-keygen", "-F", "[192.0.2.7]:2222", "-f", str(known)], capture_output=True,
                           text=True, timeout=30, check=True).stdout  # fmt: skip
    assert all(blob in found for _, blob, *_ in pubs)
    assert _fingerprints(known.read_text()) == _fingerprints("".join(" ".join(p) + "\n" for p in pubs))
    changed = accept_hint(True, "192.0.2.7", 22, str(known), [f"192.0.2.7 {pubs[0][0]} {pubs[0][1]}"])
    assert changed.count(f"ssh-keygen -R 192.0.2.7 -f {known}; then append") == 1
    assert "no key could be read" in accept_hint(False, "192.0.2.7", 22, str(known), [])


def _fingerprints(keys: str) -> list[str]:
    out = subprocess.run(["ssh-keygen", "-lf", "-"], input=keys, capture_output=True, text=True, timeout=30,
                         check=True).stdout  # fmt: skip
    return sorted(line.split()[1] for line in out.splitlines())
