import json
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.cli import main as cli
from appliance.core import target
from appliance.core.errors import UsageError
from appliance.frontdoor import hosts as frontdoor
from tests.conftest import ROOT


def test_order_db_option_first(tmp_path) -> None:
    env = {"HVNET_DB": "unix:/env.sock", "HVNET_LAB_DIR": str(tmp_path)}
    t = target.resolve("tcp:127.0.0.1:6640", environ=env)
    assert (t.remote, t.source) == ("tcp:127.0.0.1:6640", "--db")


def test_env_then_system_default(tmp_path) -> None:
    env = {"HVNET_DB": "unix:/env.sock", "HVNET_LAB_DIR": str(tmp_path)}
    assert target.resolve(environ=env).source == "HVNET_DB"
    t = target.resolve(environ={"HVNET_LAB_DIR": str(tmp_path / "no-lab")})
    assert (t.remote, t.source) == (target.SYSTEM_DB, "system default")


@pytest.mark.parametrize(
    "bad",
    ["db.sock", "unix:", "tcp:", "tcp:host:99999", "tcp:host:0", "http://x", "ssl:a b:1", "tcp:::1:6640",
     "tcp:a:6640,", ",tcp:a", "tcp:a:6640,b:6640", "ptcp:6640"],
)  # fmt: skip
def test_invalid_targets(bad) -> None:
    with pytest.raises(UsageError, match="invalid OVSDB target") as err:
        target.resolve(bad, environ={})
    assert "tcp:HOST[:PORT]" in str(err.value.hint) and "separated by commas" in str(err.value.hint)


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("tcp:127.0.0.1", "tcp:127.0.0.1:6640"),
        ("ssl:ovs.example.net", "ssl:ovs.example.net:6640"),
        ("tcp:[::1]", "tcp:[::1]:6640"),
        ("tcp:[fd00::1]:16640", "tcp:[fd00::1]:16640"),
        ("tcp:[fe80::1%eth0]:6640", "tcp:[fe80::1%eth0]:6640"),
        ("unix:/run/openvswitch/db.sock", "unix:/run/openvswitch/db.sock"),
        ("tcp:a:6641,tcp:b,unix:/x.sock", "tcp:a:6641,tcp:b:6640,unix:/x.sock"),
    ],
)
def test_every_form_the_idl_takes_is_accepted_in_one_spelling(given: str, canonical: str) -> None:
    """Python's stream layer has no default port (``tcp:h`` would fail there): hvnet fills in 6640."""
    assert target.validate_remote(given, "--db") == canonical
    assert target.DbTarget(canonical, "--db").remotes == canonical.split(",")


def test_a_relative_unix_path_is_made_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert target.resolve("unix:run/db.sock", environ={}).remote == f"unix:{tmp_path}/run/db.sock"


def test_a_bad_cluster_member_is_named() -> None:
    with pytest.raises(UsageError) as err:
        target.resolve(None, environ={"HVNET_DB": "tcp:a:6640,tcp:b:70000"})
    assert err.value.message == "HVNET_DB: invalid OVSDB target 'tcp:b:70000' (in 'tcp:a:6640,tcp:b:70000')"


def test_a_cluster_with_an_ssl_member_needs_the_ssl_files() -> None:
    with pytest.raises(UsageError, match="needs --ssl-key, --ssl-cert, --ssl-ca"):
        target.resolve("tcp:a,ssl:b", environ={})


def test_ovs_ssl_flag_names_are_accepted(tmp_path: Path) -> None:
    """ovs-vsctl's -p/-c/-C and --private-key/--certificate/--ca-cert set what --ssl-key/-cert/-ca set."""
    for n in ("k", "c", "ca"):
        (tmp_path / n).write_text("x")
    k, c, ca = (str(tmp_path / n) for n in ("k", "c", "ca"))
    parser = cli.build_parser()
    for argv in (["--ssl-key", k, "--ssl-cert", c, "--ssl-ca", ca], ["-p", k, "-c", c, "-C", ca],
                 [f"--private-key={k}", f"--certificate={c}", f"--ca-cert={ca}"]):  # fmt: skip
        args = parser.parse_args(["--db", "ssl:[::1]", *argv, "status"])
        host = frontdoor.host_of(args)
        assert host.target.remote == "ssl:[::1]:6640"
        assert host.target.ssl == target.SslOptions(private_key=k, certificate=c, ca_cert=ca)


def test_ssl_needs_key_cert_ca(tmp_path) -> None:
    with pytest.raises(UsageError, match="needs --ssl-key, --ssl-cert, --ssl-ca"):
        target.resolve("ssl:10.0.0.1:6640", environ={})
    for n in ("k", "c", "ca"):
        (tmp_path / n).write_text("x")
    t = target.resolve(
        "ssl:[::1]:6640", ssl_key=str(tmp_path / "k"), ssl_cert=str(tmp_path / "c"), ssl_ca=str(tmp_path / "ca"),
        environ={},
    )  # fmt: skip
    assert t.ssl is not None and t.ssl.ca_cert.endswith("ca")
    with pytest.raises(UsageError, match="no such file"):
        target.resolve("ssl:h:1", ssl_key="/nonexistent", ssl_cert="/x", ssl_ca="/y", environ={})


# -- a running lab versus the agent unit ---------------------------------------------------

UNIT = ROOT / "rpm" / "hvnet-agent.service"


@pytest.fixture()
def running_lab(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A lab record as a running lab leaves it: lab.json, db.sock and a live ovsdb-server.pid.

    The "server" is a sleeping interpreter whose command line names the run directory,
    which is all :func:`appliance.core.labstate.running_lab_db` asks of a lab's ovsdb-server.
    """
    run_dir = tmp_path / "lab"
    run_dir.mkdir()
    (run_dir / "lab.json").write_text(json.dumps({"db": f"unix:{run_dir / 'db.sock'}"}))
    (run_dir / "db.sock").touch()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(run_dir)])
    try:
        deadline = time.monotonic() + 10  # until the child has exec'd (before, /proc shows the parent's cmdline)
        while str(run_dir).encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        (run_dir / "ovsdb-server.pid").write_text(f"{proc.pid}\n")
        yield {"HVNET_LAB_DIR": str(run_dir)}
    finally:
        proc.kill()
        proc.wait()


def test_a_running_lab_is_found_without_no_lab(running_lab: dict[str, str]) -> None:
    host = frontdoor.build_host(environ=running_lab)
    assert (host.target.source, host.target.remote) == ("lab", f"unix:{running_lab['HVNET_LAB_DIR']}/db.sock")


def test_no_lab_resolves_the_system_ovs_while_a_lab_runs(running_lab: dict[str, str]) -> None:
    host = frontdoor.build_host(environ=running_lab, discover_lab=False)
    assert (host.target.remote, host.target.source) == (target.SYSTEM_DB, "system default")
    assert not str(host.paths.state_dir).startswith(running_lab["HVNET_LAB_DIR"])
    configured = frontdoor.build_host("unix:/srv/ovs/db.sock", environ=running_lab, discover_lab=False)
    assert (configured.target.remote, configured.target.source) == ("unix:/srv/ovs/db.sock", "--db")


def _unit_argv() -> list[str]:
    line = next(ln for ln in UNIT.read_text().splitlines() if ln.startswith("ExecStart="))
    argv = shlex.split(line.removeprefix("ExecStart="))
    assert argv[0] == "/usr/bin/hvnet"
    return argv[1:]


def test_the_agent_unit_never_resolves_a_running_lab(running_lab: dict[str, str], monkeypatch) -> None:
    """The unit's own command line, parsed by hvnet's parser, with a lab running on the machine."""
    for name in ("HVNET_DB", "HVNET_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HVNET_LAB_DIR", running_lab["HVNET_LAB_DIR"])
    args = cli.build_parser().parse_args(_unit_argv())
    assert args.command == "agent"
    assert frontdoor.host_of(args).target.remote == target.SYSTEM_DB


# -- tcp: targets ----------------------------------------------------------------------------


def test_tcp_target_is_warned_about_once(tmp_path: Path, caplog) -> None:
    env = {"HVNET_LAB_DIR": str(tmp_path / "no-lab")}
    remote = "tcp:192.0.2.77:6640"  # a remote no other test uses: the warning is once per process
    with caplog.at_level(logging.WARNING, logger="hvnet"):
        frontdoor.build_host(remote, environ=env)
        frontdoor.build_host(remote, environ=env)
        frontdoor.build_host("unix:/x/db.sock", environ=env)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert remote in warnings[0] and "neither encrypted nor authenticated" in warnings[0]
    assert "use ssl:192.0.2.77:6640" in warnings[0]


def test_tcp_from_the_environment_is_warned_about_on_stderr(tmp_path: Path) -> None:
    """Through the real CLI: the warning reaches stderr before the (refused) connection is reported."""
    env = {**os.environ, "HVNET_DB": "tcp:127.0.0.1:1", "HVNET_LAB_DIR": str(tmp_path / "no-lab")}
    res = subprocess.run([sys.executable, "-m", "appliance", "--timeout", "1", "status"], capture_output=True,
                         text=True, cwd=ROOT, env=env, timeout=60, check=False)  # fmt: skip
    assert res.stderr.count("is plain TCP") == 1, res.stderr
    assert "hvnet: warning: tcp:127.0.0.1:1 (from HVNET_DB) is plain TCP" in res.stderr  # one "warning:", not two
    assert "tcp:127.0.0.1:1 (from HVNET_DB)" in res.stderr and "use ssl:127.0.0.1:1" in res.stderr


def test_unix_and_ssl_targets_carry_no_warning() -> None:
    for remote in ("unix:/run/db.sock", "ssl:192.0.2.1:6640"):
        assert target.DbTarget(remote, "--db").insecure_warning() is None


def test_a_cluster_with_a_tcp_member_is_warned_about() -> None:
    warning = target.DbTarget("ssl:a:6640,tcp:b:6640", "--db").insecure_warning()
    assert warning is not None and "use ssl:a:6640,ssl:b:6640 with" in warning
    assert target.DbTarget("ssl:a:6640,unix:/x", "--db").insecure_warning() is None
