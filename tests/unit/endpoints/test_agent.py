"""The guest agent endpoints' pure parts: virsh's argv, its replies and errors, and the group's shell texts."""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import threading
from pathlib import Path

import pytest

from appliance.core.errors import HvnetError
from appliance.endpoints import agentshell as sh
from appliance.endpoints.agent import AgentChannel, AgentLauncher, AgentUnavailable, DomainNotFound
from appliance.endpoints.agentshell import (
    EL_HINT,
    agent_argv,
    classify_error,
    decode,
    parse_reply,
    record_name,
    status_code,
)
from appliance.endpoints.jobs import Job

HOSTILE = ["a b", "$(touch /tmp/x)", "`id`", "'", '"', "\\", "\n", "*", ";rm -rf /;", "", "-n", "\x1b[2J"]

# virsh 9.0 (Debian 12) and QEMU 7.2's qemu-ga.  Captured by tests/vm/test_guest_agent.py: domain not
# found, agent stopped, disabled (qemu-ga -b guest-exec,guest-file-open).  The other three are libvirt's
# message texts for those states (src/qemu/qemu_agent.c, qemu_domain.c), not seen in a run.
ERRORS = {
    "domain not found": "error: failed to get domain 'no-such-domain'\n",
    "agent stopped": "error: Guest agent is not responding: QEMU guest agent is not connected\n",
    "disabled": "error: internal error: unable to execute QEMU agent command 'guest-exec': "
    "Command guest-exec has been disabled\n",
    "file disabled": "error: internal error: unable to execute QEMU agent command 'guest-file-open': "
    "Command guest-file-open has been disabled\n",
    "domain not running": "error: Requested operation is not valid: domain is not running\n",
    "agent slow": "error: Guest agent is not responding: Guest agent not available for now\n",
    "no channel": "error: argument unsupported: QEMU guest agent is not configured\n",
}


def test_argv_keeps_the_domain_and_the_command_as_data() -> None:
    argv = agent_argv("-x; id", "guest-exec", {"path": "sh", "arg": ["-c", "a'b"]}, 9.6, "qemu:///system")
    assert argv[:7] == ["virsh", "-c", "qemu:///system", "qemu-agent-command", "--domain", "-x; id", "--timeout"]
    assert argv[7] == "10" and argv[8] == "--cmd"
    assert json.loads(argv[9]) == {"execute": "guest-exec", "arguments": {"path": "sh", "arg": ["-c", "a'b"]}}
    assert agent_argv("d", "guest-ping", None, 0.2)[1:] == [
        "qemu-agent-command", "--domain", "d", "--timeout", "1", "--cmd", '{"execute":"guest-ping"}']  # fmt: skip


def test_replies_give_their_return_or_a_clear_error() -> None:
    assert parse_reply('{"return":{"pid":812}}\n', "d") == {"pid": 812}
    assert parse_reply('noise\n{"return":{}}\n', "d") == {}
    with pytest.raises(HvnetError, match="not JSON"):
        parse_reply("<html>", "d")
    with pytest.raises(AgentUnavailable):
        parse_reply('{"error":{"class":"GenericError","desc":"Command guest-exec has been disabled"}}', "d")


@pytest.mark.parametrize(
    ("case", "kind", "exit_code"),
    [("domain not found", DomainNotFound, 3), ("domain not running", DomainNotFound, 3),
     ("agent stopped", AgentUnavailable, 4), ("agent slow", AgentUnavailable, 4),
     ("no channel", AgentUnavailable, 4), ("disabled", AgentUnavailable, 4),
     ("file disabled", AgentUnavailable, 4)],
)  # fmt: skip
def test_virsh_errors_map_to_what_the_operator_must_do(case: str, kind: type, exit_code: int) -> None:
    err = classify_error(ERRORS[case], "domain 'VM1': guest-exec")
    assert type(err) is kind and err.exit_code == exit_code
    assert err.message.startswith("domain 'VM1': guest-exec")
    if "disabled" in case:
        assert err.hint == EL_HINT and "BLOCK_RPCS" in EL_HINT and "--allow-rpcs" in EL_HINT
    elif kind is AgentUnavailable:
        assert "qemu-guest-agent" in (err.hint or "") and "org.qemu.guest_agent.0" in (err.hint or "")


def test_an_unknown_error_is_kept_and_a_name_in_it_is_shown_not_obeyed() -> None:
    err = classify_error("error: failed to get domain '\x1b[2J'\n", "domain '\\x1b[2J'")
    assert isinstance(err, DomainNotFound) and "\x1b" not in str(err)
    other = classify_error("error: something new\n", "d")
    assert type(other) is HvnetError and "something new" in str(other)


def test_outputs_and_statuses() -> None:
    assert decode(base64.b64encode("é\x1b\n".encode()).decode()) == "é\x1b\n"
    assert decode(base64.b64encode(b"\xff").decode()) == "\ufffd"
    assert decode(None) == "" and decode("!!") == ""
    assert status_code({"exited": True, "exitcode": 3}) == 3
    assert status_code({"exited": True, "signal": 15}) == -15
    assert status_code({"exited": True}) == -1


def test_the_record_is_named_by_a_hash_of_the_domain() -> None:
    name = record_name("../../etc/passwd", None)
    assert "/" not in name and "passwd" not in name and name.endswith(".json")
    assert record_name("d", "qemu:///system") != record_name("d", "qemu+ssh://h/system")


def _job_words(text: str) -> list[list[str]]:
    """The job lines of a start script, run by the real sh with ``job`` printing its arguments."""
    chunk = text[text.index(sh.START) + len(sh.START) : text.rindex(sh.REPORT)]
    show = 'job() { for w; do printf "%s\\0" "$w"; done; printf "\\1"; }\n'
    out = subprocess.run(["sh", "-c", show + chunk], capture_output=True, check=True).stdout.decode()
    return [rec.split("\0")[:-1] for rec in out.split("\1")[:-1]]


def test_every_word_of_a_job_reaches_the_shell_as_one_word() -> None:
    text = sh.start_script([Job("j0", ("netperf", *HOSTILE)), Job("j1", ("true",), env={"X": "$(id) 'a'"})])
    assert _job_words(text) == [["j0", "netperf", *HOSTILE], ["j1", "env", "X=$(id) 'a'", "true"]]
    # the fixed texts are verbatim, each one a single quoted word
    for name, fixed in (("J", sh.JOB), ("C", sh.COMMON), ("H", sh.HOLDER), ("W", sh.WRAP)):
        assert f"{name}={shlex.quote(fixed)}\n" in text
    with pytest.raises(ValueError, match="namespace"):
        sh.start_script([Job("j", ("true",), netns="ns")])


@pytest.mark.parametrize("shell", ["sh", "bash", "busybox"])
def test_the_scripts_parse_in_each_shell(shell: str) -> None:
    argv = ["busybox", "sh"] if shell == "busybox" else [shell]
    for text in (sh.start_script([Job("j", ("true",))]), sh.with_common(sh.RELEASE), sh.POLL,
                 sh.with_common(sh.SIGNAL), sh.CAT, sh.with_common(sh.CLOSE), sh.with_common(sh.SWEEP),
                 sh.JOB, sh.with_common(sh.HOLDER), sh.WRAP):  # fmt: skip
        subprocess.run([*argv, "-n", "-c", text], check=True)


def test_start_poll_and_release_answers() -> None:
    got = sh.parse_start(
        "pid j0 812 4411\npid j1 813 4412\npid bad x 1\nholder 800 4400\nshell bash\n"
        "boot 0a1b2c3d-0000-4000-8000-000000000000\nready 2 2\n\x1b[2Jjunk\n"
    )
    assert got.pids == {"j0": (812, "4411"), "j1": (813, "4412")} and got.holder == (800, "4400")
    assert (got.shell, got.ready, got.error) == ("bash", 2, None)
    assert sh.parse_start("error /var/tmp/x has mode 777: another user could write there\n").error is not None
    polled = sh.parse_poll("exit j0 0 1795765228.272658\nexit j1 143 -\nexit j2 - -\nexit a b\npolled\n")
    assert polled == {"j0": (0, 1795765228272658000), "j1": (143, None), "j2": (None, None)}
    assert sh.parse_released("released 1795765228,272658\n") == 1795765228272658000
    assert sh.parse_released("nothing\n") is None


class _Here(AgentChannel):
    """guest-exec stood in for by running the argv here: the scripts' logic, for real, without a VM."""

    def __init__(self) -> None:
        self.runner = None  # type: ignore[assignment]
        self.domain, self.uri, self.label, self.timeout = "here", None, "here", 10.0
        self._lock = threading.Lock()

    def run(self, argv, *, timeout=60.0, input_text=None):  # type: ignore[no-untyped-def]
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def test_a_group_runs_its_scripts_for_real_here(tmp_path: Path) -> None:
    launcher = AgentLauncher(_Here(), records=tmp_path / "rec", base=str(tmp_path / "base"))
    group = launcher.group("u")
    group.start([Job("ok", ("printf", "%s\\n", *HOSTILE)), Job("bad", ("sh", "-c", "exit 3"))], hold=True)
    try:
        assert group.ready == 2 and set(group.pids()) == {"ok", "bad"}
        assert group.release() is not None
        group._last_poll = 0.0
        deadline = 50
        while {n for n, r in group.results.items() if r.returncode is None} and deadline:
            group._last_poll = 0.0
            group.poll()
            deadline -= 1
            subprocess.run(["sleep", "0.1"])
        assert group.results["ok"].returncode == 0 and group.results["bad"].returncode == 3
        group.fetch(tmp_path / "out")
        assert (tmp_path / "out" / "ok.out").read_text() == "".join(f"{w}\n" for w in HOSTILE)
    finally:
        group.close()
    assert not Path(group.dir).exists() and not launcher.record.exists()


def test_a_base_with_odd_characters_is_refused(tmp_path: Path) -> None:
    for base in ("relative", "/var/tmp/a b", "/var/tmp/$(id)", "/var/tmp/../etc"):
        with pytest.raises(HvnetError):
            AgentLauncher(_Here(), records=tmp_path, base=base)


def test_sweep_leaves_a_running_hvnets_group_and_stops_a_dead_ones(tmp_path: Path) -> None:
    launcher = AgentLauncher(_Here(), records=tmp_path / "rec", base=str(tmp_path / "base"))
    group = launcher.group("s")
    group.start([Job("l", ("sleep", "60"))], hold=False)
    try:
        pid = group.pids()["l"]
        assert launcher.sweep() == [] and Path(group.dir).is_dir()  # its hvnet (this process) still runs
        record = json.loads(launcher.record.read_text())
        record["groups"][group.id]["owner"] = [record["groups"][group.id]["owner"][0], "0"]  # as if it died
        launcher.record.write_text(json.dumps(record))
        done = AgentLauncher(_Here(), records=tmp_path / "rec", base=str(tmp_path / "base")).sweep()
        assert f"stopped {pid}" in done and f"removed {group.dir}" in done
        assert not Path(group.dir).exists() and not launcher.record.exists()
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
    finally:
        group.close()
