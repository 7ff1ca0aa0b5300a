"""hvnet.conf: parsing (every problem with file:line), precedence (flag > variable > file > default),
the shipped example, and that every HVNET_* setting is read through appliance.core.config."""

from __future__ import annotations

import configparser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.core import config, labstate
from appliance.core import hostlist as hosts
from appliance.core.errors import ConfigError, UsageError
from appliance.frontdoor import hosts as frontdoor
from appliance.lab.vm.image import DEFAULT_CACHE
from appliance.services import scrape
from appliance.switch import names, xapi
from appliance.switch.host import DEFAULT_POLICY_FILE, DataPaths
from tests.conftest import ROOT

SHIPPED = ROOT / "rpm/hvnet.conf"


def _file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "hvnet.conf"
    p.write_text(text)
    return p


def _problems(tmp_path: Path, text: str) -> list[str]:
    p = _file(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        config.load({"HVNET_CONFIG": str(p)})
    assert exc.value.exit_code == 2
    return [str(x) for x in exc.value.problems]


# -- parsing ---------------------------------------------------------------------------


def test_every_problem_names_file_line_key_and_what_is_allowed(tmp_path: Path) -> None:
    text = (
        "# comment\n"
        "[target]\n"
        "db = ovsdb.example.org\n"  # 3: no unix:, tcp: or ssl:
        "dbb = unix:/x\n"  # 4: typo
        "[data]\n"
        "runs_dir = runs\n"  # 6: relative
        "[exporterr]\n"  # 7: unknown section
        "listen = 1\n"
        "[names]\n"
        "xapi_timeout = 301\n"  # 10
        "xapi_timeout = 2\n"  # 11: twice
        "[remote]\n"
        "state_dir = /x\n"  # 13: key of another section
        "[agent]\n"
        "policing = fast\n"  # 15
        "policy = /etc/hvnet/policy.yaml # the default\n"  # 16: inline comment
    )
    where = str(tmp_path / "hvnet.conf")
    got = _problems(tmp_path, text)
    assert got[0].startswith(f"{where}:3: target.db: 'ovsdb.example.org' is not allowed; allowed: use unix:")
    assert got[1:] == [
        f"{where}:4: target.dbb: unknown key; [target] takes db, host, ssl_key, ssl_cert, ssl_ca; did you mean db?",
        f"{where}:6: data.runs_dir: 'runs' is not allowed; allowed: an absolute path (starting with /)",
        f"{where}:7: [exporterr]: unknown section; allowed: target, data, names, remote, agent, exporter, measure, lab; "
        "did you mean exporter?",
        f"{where}:10: names.xapi_timeout: '301' is not allowed; allowed: a number of seconds greater than 0 and "
        "at most 300",
        f"{where}:13: remote.state_dir: unknown key; [remote] takes inventory, ssh_config, ssh_known_hosts, "
        "ssh_identity, ovs_rundir; did you mean data.state_dir?",
        f"{where}:15: agent.policing: 'fast' is not allowed; allowed: auto, tc or meter",
        f"{where}:16: agent.policy: a comment after the value is not read; put it on a line of its own",
    ]


@pytest.mark.parametrize(
    ("text", "line", "expected"),
    [
        ("db = unix:/x\n", 1, "db: comes before any [section] header"),
        ("[target]\n  db = unix:/x\n", 2, "line: indented line"),
        ("[target]\nthis is not a setting\n", 2, "line: not a [section] header"),
        ("[target]\ndb =\n", 2, "target.db: empty"),
        ("[target]\ndb = unix:/x\ndb = unix:/y\n", 3, "target.db: given twice (first on line 2)"),
        ("[target]\ndb = unix:/x\nhost = xs01\n", 3, "target: db and host name two different switches"),
        ("[Target]\n", 1, "[Target]: unknown section; allowed: target, data, names, remote, agent, exporter, measure, lab; "
                          "did you mean target?"),
        ("[exporter]\nlisten = 0.0.0.0:99999\n", 2, "exporter.listen: '0.0.0.0:99999' is not allowed"),
        ("[names]\nlibvirt_uri = system\n", 2, "names.libvirt_uri: 'system' is not allowed"),
        ("[names]\nxapi_url = 192.0.2.1\n", 2, "names.xapi_url: '192.0.2.1' is not allowed"),
        ("[target]\nhost = -oProxyCommand=x\n", 2, "target.host: '-oProxyCommand=x' is not allowed"),
    ],
)  # fmt: skip
def test_one_problem(tmp_path: Path, text: str, line: int, expected: str) -> None:
    (got,) = _problems(tmp_path, text)
    assert got.startswith(f"{tmp_path / 'hvnet.conf'}:{line}: {expected}"), got


def test_values_keep_their_lines_and_configparser_reads_the_same(tmp_path: Path) -> None:
    text = (
        "; hvnet\n[target]\ndb = ssl:192.0.2.1:6640\n\n[data]\nruns_dir = /srv/hvnet runs\n"
        "[exporter]\nlisten = [::1]:9477\n[names]\nlibvirt_uri = none\n"
    )
    p = _file(tmp_path, text)
    f = config.load({"HVNET_CONFIG": str(p)})
    assert {k: (v.value, v.line) for k, v in f.values.items()} == {
        "HVNET_DB": ("ssl:192.0.2.1:6640", 3), "HVNET_RUNS_DIR": ("/srv/hvnet runs", 6),
        "HVNET_EXPORTER_LISTEN": ("[::1]:9477", 8), "HVNET_LIBVIRT_URI": ("none", 10),
    }  # fmt: skip
    cp = configparser.ConfigParser(interpolation=None)
    cp.read_string(text)
    assert {config.BY_NAME[f"{s}.{k}"].env: v for s in cp.sections() for k, v in cp[s].items()} == {
        k: v.value for k, v in f.values.items()
    }


def test_a_named_file_must_exist_the_default_may_be_absent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UsageError, match="HVNET_CONFIG: no such file"):
        config.load({"HVNET_CONFIG": str(tmp_path / "missing.conf")})
    monkeypatch.setattr(config, "DEFAULT_FILE", tmp_path / "absent.conf")
    assert config.load({}).values == {} and config.load({}).path is None


def test_a_file_others_can_write_is_refused(tmp_path: Path) -> None:
    p = _file(tmp_path, "[target]\ndb = unix:/a.sock\n")
    p.chmod(0o666)
    with pytest.raises(UsageError, match="mode 666: another user could choose what hvnet does"):
        config.load({"HVNET_CONFIG": str(p)})
    p.chmod(0o644)
    os.chown(p, 65534, -1)
    with pytest.raises(UsageError, match="owned by uid 65534"):
        config.load({"HVNET_CONFIG": str(p)})


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    p = _file(tmp_path, "[target]\ndb = unix:/a.sock\n")
    env = {"HVNET_CONFIG": str(p)}
    assert config.environ(env)["HVNET_DB"] == "unix:/a.sock"
    p.write_text("[target]\ndb = unix:/bb.sock\n")
    assert config.environ(env)["HVNET_DB"] == "unix:/bb.sock"


# -- the shipped example ---------------------------------------------------------------


def test_the_shipped_file_changes_nothing_and_documents_every_setting() -> None:
    text = SHIPPED.read_text()
    assert config.parse(text, SHIPPED).values == {}
    for s in config.SETTINGS:
        assert f"[{s.section}]" in text and re.search(rf"^#{s.key} = ", text, re.M), s.name
        assert s.env in text, s.env


def test_the_shipped_examples_uncommented_are_valid_and_the_defaults_are_the_codes() -> None:
    lines = [line[1:] if re.match(r"^#[a-z_]+ = ", line) and not line.startswith("#host") else line
             for line in SHIPPED.read_text().splitlines()]  # fmt: skip
    f = config.parse("\n".join(lines), SHIPPED)
    defaults = {s.env: s.default for s in config.SETTINGS if s.default is not None}
    for env, default in defaults.items():
        assert f.values[env].value == default, env  # the example shows the built-in default
    paths = DataPaths()
    assert defaults == {
        "HVNET_STATE_DIR": str(paths.state_dir), "HVNET_AUDIT_LOG": str(paths.audit_log),
        "HVNET_RUNS_DIR": str(paths.runs_dir), "HVNET_PCAP_DIR": str(paths.pcap_dir),
        "HVNET_CAPTURES_DIR": str(paths.captures_dir), "HVNET_LIBVIRT_URI": names.DEFAULT_URI,
        "HVNET_XAPI_TIMEOUT": f"{xapi.DEFAULT_XAPI_TIMEOUT:g}", "HVNET_INVENTORY": str(hosts.DEFAULT_INVENTORY),
        "HVNET_REMOTE_OVS_RUNDIR": "/var/run/openvswitch", "HVNET_POLICY": DEFAULT_POLICY_FILE,
        "HVNET_EXPORTER_LISTEN": config.DEFAULT_EXPORTER_LISTEN, "HVNET_LAB_DIR": labstate.DEFAULT_LAB_DIR,
        "HVNET_EXPORTER_SCRAPE_TIMEOUT": f"{scrape.DEFAULT_DEADLINE:g}",
        "HVNET_IMAGE_CACHE": str(DEFAULT_CACHE), "HVNET_CAPTURE_FREE_FLOOR": paths.pcap_free_floor,
    }  # fmt: skip


# -- precedence ------------------------------------------------------------------------


def test_flag_then_variable_then_file_then_default(tmp_path: Path) -> None:
    p = _file(tmp_path, "[target]\ndb = unix:/file.sock\n[data]\nruns_dir = /file/runs\n")
    base = {"HVNET_CONFIG": str(p)}
    assert config.resolve("data.state_dir", env=base).source == "default"
    r = config.resolve("target.db", env=base)
    assert (r.value, r.source, r.kind) == ("unix:/file.sock", f"{p}:2", "file")
    r = config.resolve("target.db", env={**base, "HVNET_DB": "unix:/env.sock"})
    assert (r.value, r.source) == ("unix:/env.sock", "env HVNET_DB")
    r = config.resolve("target.db", "unix:/flag.sock", env={**base, "HVNET_DB": "unix:/env.sock"})
    assert (r.value, r.source) == ("unix:/flag.sock", "flag --db")
    assert config.resolve("target.db", env={**base, "HVNET_DB": ""}).source == f"{p}:2"  # empty: unset


def test_the_host_is_built_from_the_same_order(tmp_path: Path) -> None:
    p = _file(tmp_path, "[target]\ndb = unix:/file.sock\n[data]\nruns_dir = /file/runs\naudit_log = /file/a.jsonl\n")
    env = {"HVNET_CONFIG": str(p), "HVNET_LAB_DIR": str(tmp_path / "no-lab")}
    host = frontdoor.build_host(environ=config.environ(env))
    assert host.remote == "unix:/file.sock" and host.target.source == f"{p}:2"
    assert host.paths.runs_dir == Path("/file/runs") and host.paths.audit_log == Path("/file/a.jsonl")
    host = frontdoor.build_host(environ=config.environ({**env, "HVNET_DB": "unix:/env.sock"}))
    assert (host.remote, host.target.source) == ("unix:/env.sock", "HVNET_DB")
    host = frontdoor.build_host("unix:/flag.sock", environ=config.environ({**env, "HVNET_DB": "unix:/env.sock"}))
    assert (host.remote, host.target.source) == ("unix:/flag.sock", "--db")


def test_a_labs_state_stays_its_own_whatever_the_file_says(tmp_path: Path) -> None:
    p = _file(tmp_path, "[data]\nstate_dir = /file/state\naudit_log = /file/a.jsonl\nruns_dir = /file/runs\n")
    lab = tmp_path / "lab"
    paths = frontdoor.data_paths(config.environ({"HVNET_CONFIG": str(p)}), lab)
    assert (paths.state_dir, paths.audit_log, paths.runs_dir) == (lab, lab / "audit.jsonl", Path("/file/runs"))
    paths = frontdoor.data_paths(config.environ({"HVNET_CONFIG": str(p), "HVNET_STATE_DIR": "/env/state"}), lab)
    assert paths.state_dir == Path("/env/state")  # a variable still moves it, as before


def test_a_host_in_the_file_yields_to_a_database_variable(tmp_path: Path) -> None:
    p = _file(tmp_path, "[target]\nhost = xs01\n")
    env = config.environ({"HVNET_CONFIG": str(p)})
    assert frontdoor.configured_host(None, env) == "xs01"
    assert frontdoor.configured_host("unix:/flag.sock", env) is None
    assert frontdoor.configured_host(None, config.environ({"HVNET_CONFIG": str(p), "HVNET_DB": "unix:/e"})) is None
    env = config.environ({"HVNET_CONFIG": str(p), "HVNET_HOST": "xs02", "HVNET_DB": "unix:/e"})
    assert frontdoor.configured_host(None, env) == "xs02"  # both variables: the host, as before
    assert "HVNET_HOST" not in env.without("HVNET_HOST")


def test_libvirts_own_variable_outranks_the_file(tmp_path: Path) -> None:
    p = _file(tmp_path, "[names]\nlibvirt_uri = qemu+ssh://kvm1/system\n")
    env = {"HVNET_CONFIG": str(p)}
    assert names.libvirt_uri(None, config.environ(env)) == "qemu+ssh://kvm1/system"
    assert names.libvirt_uri(None, config.environ({**env, "LIBVIRT_DEFAULT_URI": "xen:///system"})) == "xen:///system"
    assert config.resolve("names.libvirt_uri", env={**env, "LIBVIRT_DEFAULT_URI": "x:///"}).source == (
        "env LIBVIRT_DEFAULT_URI"
    )
    assert names.libvirt_uri("none", config.environ(env)) is None


def test_the_exporters_address(tmp_path: Path) -> None:
    p = _file(tmp_path, "[exporter]\nlisten = [::1]:9100\n")
    env = {"HVNET_CONFIG": str(p)}
    assert str(config.exporter_listen(env={})) == "127.0.0.1:9477"
    got = config.exporter_listen(env=env)
    assert (got.host, got.port, got.source, str(got)) == ("::1", 9100, f"{p}:2", "[::1]:9100")
    got = config.exporter_listen("0.0.0.0:9200", env=env)
    assert (got.host, got.port, got.source) == ("0.0.0.0", 9200, "flag --listen")
    with pytest.raises(UsageError, match=r"env HVNET_EXPORTER_LISTEN: 'localhost' is not an address"):
        config.exporter_listen(env={**env, "HVNET_EXPORTER_LISTEN": "localhost"})


# -- one reader ------------------------------------------------------------------------


_READS = re.compile(r"""(?:environ\.get|environ\[|getenv)\(?\s*["'](HVNET_[A-Z_]+)""")
# Not settings: variables a parent sets for the child it starts (gexec's CPU report and ready timeout).
_CHILD_PROTOCOL = {"appliance/lab/vm/gexec.py"}


def test_no_module_reads_an_hvnet_setting_from_the_environment_itself() -> None:
    found = []
    for path in sorted([*ROOT.glob("appliance/**/*.py"), *ROOT.glob("tui/**/*.py")]):
        rel = str(path.relative_to(ROOT))
        if rel == "appliance/core/config.py" or rel in _CHILD_PROTOCOL:
            continue
        text = path.read_text()
        found += [f"{rel}: {m.group(1)}" for m in _READS.finditer(text) if "os.environ" in text or "getenv" in text]
    assert found == []


def test_every_variable_the_front_door_names_is_a_setting() -> None:
    documented = set(re.findall(r"HVNET_[A-Z_]*[A-Z]\b", frontdoor.__doc__ or ""))  # not HVNET_XAPI_*
    assert {"HVNET_DB", "HVNET_SSL_KEY", "HVNET_STOP_AT", "HVNET_REMOTE_OVS_RUNDIR"} <= documented
    settings = {s.env for s in config.SETTINGS} | set(config.ENV_ONLY)
    assert documented - settings == set()


# -- hvnet config show -------------------------------------------------------------------


def _show(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=60, check=False)  # fmt: skip


def test_config_show_says_where_each_value_came_from(tmp_path: Path) -> None:
    p = _file(tmp_path, "[target]\ndb = unix:/file.sock\n\n[data]\nruns_dir = /srv/runs\npcap_dir = /srv/pcaps\n")
    env = {"PATH": "/usr/bin:/bin", "HVNET_CONFIG": str(p), "HVNET_LAB_DIR": str(tmp_path / "no-lab"),
           "HVNET_PCAP_DIR": "/env/pcaps"}  # fmt: skip
    res = _show("--libvirt", "none", "config", "show", "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["file"], doc["file_present"], doc["named_by"]) == (str(p), True, "HVNET_CONFIG")
    got = {s["name"]: (s["value"], s["source"]) for s in doc["settings"]}
    assert got["target.db"] == ("unix:/file.sock", f"{p}:2")
    assert got["data.runs_dir"] == ("/srv/runs", f"{p}:5")
    assert got["data.pcap_dir"] == ("/env/pcaps", "env HVNET_PCAP_DIR")
    assert got["names.libvirt_uri"] == ("none", "flag --libvirt")
    assert got["data.state_dir"] == ("/var/lib/hvnet", "default")
    assert [s["name"] for s in doc["settings"]] == [s.name for s in config.SETTINGS]

    res = _show("config", "show", env=env)
    assert res.returncode == 0, res.stderr
    lines = {line.split()[0]: line for line in res.stdout.splitlines() if line.split()}
    assert lines["target.db"].split()[1:3] == ["unix:/file.sock", f"{p}:2"]
    assert lines["data.pcap_dir"].split()[1:4] == ["/env/pcaps", "env", "HVNET_PCAP_DIR"]


def test_a_broken_file_stops_every_command_with_exit_2(tmp_path: Path) -> None:
    p = _file(tmp_path, "[target]\ndb = x\n[agent]\npolcy = /x\n")
    env = {"PATH": "/usr/bin:/bin", "HVNET_CONFIG": str(p)}
    for argv in (("config", "show"), ("status",)):
        res = _show(*argv, env=env)
        assert res.returncode == 2, res
        assert f"{p}:2: target.db:" in res.stderr and f"{p}:4: agent.polcy: unknown key" in res.stderr
        assert "did you mean policy?" in res.stderr and "Traceback" not in res.stderr
    res = _show("config", "show", env={**env, "HVNET_CONFIG": str(tmp_path / "none.conf")})
    assert res.returncode == 2 and "HVNET_CONFIG: no such file" in res.stderr


def test_a_capture_floor_that_means_nothing_is_refused_at_its_line(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "[data]\ncapture_free_floor = 95%\n")
    assert len(problems) == 1 and ":2: data.capture_free_floor:" in problems[0], problems
    assert "allowed: a share of the file system (0% to 90%) or a size (500MB, 2GB)" in problems[0], problems
    env = {"HVNET_CONFIG": str(_file(tmp_path, "[data]\ncapture_free_floor = 2GB\n"))}
    assert frontdoor.data_paths(config.environ(env)).pcap_free_floor == "2GB"
    assert frontdoor.data_paths(config.environ({**env, "HVNET_CAPTURE_FREE_FLOOR": "5%"})).pcap_free_floor == "5%"
