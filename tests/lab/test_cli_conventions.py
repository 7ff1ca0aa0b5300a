"""CLI conventions on the 2010 study's lab: --may-exist/--if-exists, targets the IDL takes, completion of names.

ovs-vsctl is the witness: "nothing changed" is every column the policy
engine may touch, read before and after, and equal.
"""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import run_hvnet
from tests.lab.policy_helpers import config, reset, vsctl
from tests.unit.cli.test_completion import bash_complete, generate, hvnet_on_path

TAGS = {"vif1.0": 1, "vif2.0": 1, "vif3.0": 2}
ADD = ["mirror", "add", "span1", "--bridge", "xenbr0", "--src", "vif1.0", "--output-vlan", "999"]


@pytest.fixture(autouse=True)
def clean(lab: Lab) -> Iterator[None]:
    reset(lab, TAGS)
    yield
    reset(lab, TAGS)


def hv(*args: str) -> subprocess.CompletedProcess:
    res = run_hvnet(*args)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def test_mirror_add_may_exist_and_del_if_exists(lab: Lab) -> None:
    assert hv(*ADD).returncode == 0
    before = config(lab)

    again = hv(*ADD)
    assert again.returncode == 2 and "mirror span1 already exists on xenbr0" in again.stderr

    same = hv(*ADD, "--may-exist", "--json")
    assert same.returncode == 0, same.stderr
    out = json.loads(same.stdout)
    assert out["status"] == "unchanged" and out["changes"] == []
    assert any("already exists on xenbr0 with these settings" in w for w in out["warnings"])
    assert config(lab) == before

    other = hv(*ADD[:-1], "998", "--may-exist")
    assert other.returncode == 2
    assert "with other settings" in other.stderr and "998" in other.stderr, other.stderr
    assert config(lab) == before
    assert vsctl(lab, "get", "mirror", "span1", "output_vlan") == "999"

    assert hv("mirror", "del", "span1").returncode == 0
    gone = config(lab)
    assert vsctl(lab, "--columns=name", "list", "mirror") == ""

    missing = hv("mirror", "del", "span1")
    assert missing.returncode == 2 and "no mirror named span1" in missing.stderr
    quiet = hv("mirror", "del", "span1", "--if-exists")
    assert quiet.returncode == 0, quiet.stderr
    assert "nothing deleted" in quiet.stdout
    assert config(lab) == gone


def test_capture_delete_if_exists(lab: Lab) -> None:
    res = hv("capture", "delete", "no-such-capture")
    assert res.returncode == 2 and "no capture named 'no-such-capture'" in res.stderr
    res = hv("capture", "delete", "no-such-capture", "--if-exists")
    assert res.returncode == 0 and "nothing removed" in res.stdout, res.stdout + res.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def tcp_remote(lab: Lab) -> Iterator[int]:
    """The lab's ovsdb-server also listening on 127.0.0.1:PORT (removed afterwards)."""
    port = _free_port()
    remote = f"ptcp:{port}:127.0.0.1"
    lab.switch.appctl("ovsdb-server", "ovsdb-server/add-remote", remote)
    try:
        yield port
    finally:
        lab.switch.appctl("ovsdb-server", "ovsdb-server/remove-remote", remote)


def test_a_cluster_target_whose_first_server_is_dead(lab: Lab, tcp_remote: int) -> None:
    """tcp:DEAD,tcp:LIVE: the one-shot read and the IDL's transaction both reach the live server."""
    dead = _free_port()
    target = f"tcp:127.0.0.1:{dead},tcp:127.0.0.1:{tcp_remote}"

    status = hv("--db", target, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert [b["name"] for b in json.loads(status.stdout)["bridges"]] == ["xenbr0"]
    assert "is plain TCP" in status.stderr

    add = hv("--db", target, *ADD, "--json")
    assert add.returncode == 0, add.stdout + add.stderr
    assert json.loads(add.stdout)["status"] == "applied"
    assert vsctl(lab, "get", "mirror", "span1", "output_vlan") == "999"

    both_dead = hv("--timeout", "2", "--db", f"tcp:127.0.0.1:{dead},tcp:127.0.0.1:{_free_port()}", "status")
    assert both_dead.returncode == 3, both_dead.stderr
    assert both_dead.stderr.count("Connection refused") == 2 and f"tcp:127.0.0.1:{dead}:" in both_dead.stderr


def test_tcp_without_a_port_is_6640(lab: Lab) -> None:
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 6640)) == 0:
            pytest.skip("something else listens on 127.0.0.1:6640")
    lab.switch.appctl("ovsdb-server", "ovsdb-server/add-remote", "ptcp:6640:127.0.0.1")
    try:
        res = hv("--db", "tcp:127.0.0.1", "status", "--json")
    finally:
        lab.switch.appctl("ovsdb-server", "ovsdb-server/remove-remote", "ptcp:6640:127.0.0.1")
    assert res.returncode == 0, res.stderr
    inv = json.loads(res.stdout)
    assert inv["host"]["db_target"] == "tcp:127.0.0.1:6640"
    assert {v["port"] for v in inv["vifs"]} == set(TAGS)


def test_bash_completes_the_switch_names(lab: Lab, tmp_path: Path) -> None:
    """Bridges, ports and mirrors as ``hvnet _complete`` reads them from the lab's switch, through real bash."""
    script = tmp_path / "hvnet.bash"
    script.write_text(generate("bash"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hvnet_on_path(bin_dir)

    def offers(*words: str) -> list[str]:
        return bash_complete(script, bin_dir, ["hvnet", *words], {}, tmp_path)

    assert offers("mirror", "add", "m", "--bridge", "") == ["xenbr0"]
    assert offers("vif", "set", "vif") == ["vif1.0", "vif2.0", "vif3.0"]
    assert offers("mirror", "del", "") == []
    assert hv(*ADD).returncode == 0
    assert offers("mirror", "del", "") == ["span1"]
