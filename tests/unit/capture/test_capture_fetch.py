"""Fetching an ended capture's pcaps: which names a host may list, whole files or none, nothing overwritten.

The remote side is a real ``cat`` (a runner that says it is another machine but runs here): the bytes go
through the same popen-to-file path as over SSH.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.capture import fetch
from appliance.capture.spec import is_pcap_file_name
from appliance.core.errors import HvnetError, UsageError
from appliance.core.runner import LocalRunner


class Elsewhere(LocalRunner):
    """Programs run here, but paths are read as another machine's would be (by ``cat`` through popen)."""

    local = False


@pytest.mark.parametrize(
    "file_name",
    ["vb.pcap", "vb.pcap0", "vb.pcap12", "vb-20260101-120000.pcap", "vb-20260101-120000.pcap3"],
)
def test_what_tcpdump_makes_of_a_capture_name_is_its_pcap(file_name: str) -> None:
    assert is_pcap_file_name("vb", file_name)


@pytest.mark.parametrize(
    "file_name",
    ["capture.json", "tcpdump.log", "vb.pcap/../x", "../vb.pcap", "vbx.pcap", "vb.pcap.part", ".vb.pcap",
     "vb.pcapx", "vb", "other.pcap0", "vb-2026.pcap"],
)  # fmt: skip
def test_anything_else_a_host_lists_is_not(file_name: str) -> None:
    assert not is_pcap_file_name("vb", file_name)


def source(tmp_path: Path, files: dict[str, bytes]) -> Path:
    src = tmp_path / "host" / "vb"
    src.mkdir(parents=True)
    for name, data in files.items():
        (src / name).write_bytes(data)
    return src


def test_each_listed_file_arrives_whole_and_private(tmp_path: Path) -> None:
    data = {"vb.pcap0": bytes(range(256)) * 40, "vb.pcap1": b"\xd4\xc3\xb2\xa1" + b"\0\r\n" * 9}
    src = source(tmp_path, data)
    out = tmp_path / "here" / "vb"
    done = fetch.fetch(Elsewhere(), "kvm1", "vb", src, [(n, len(b)) for n, b in data.items()], out)
    assert done.files == [("vb.pcap0", 10240), ("vb.pcap1", 31)] and done.bytes == 10271
    assert {p.name: p.read_bytes() for p in out.iterdir()} == data  # binary intact, nothing else left there
    assert {oct(p.stat().st_mode & 0o777) for p in out.iterdir()} == {"0o600"}
    assert done.to_json()["files"][0] == {"name": "vb.pcap0", "bytes": 10240}


def test_a_size_other_than_listed_leaves_no_file(tmp_path: Path) -> None:
    src = source(tmp_path, {"vb.pcap0": b"x" * 100})
    out = tmp_path / "here"
    with pytest.raises(HvnetError, match="100 bytes read, the host listed 99"):
        fetch.fetch(Elsewhere(), "kvm1", "vb", src, [("vb.pcap0", 99)], out)
    assert list(out.iterdir()) == []


def test_a_file_the_host_cannot_read_says_so(tmp_path: Path) -> None:
    src = source(tmp_path, {})
    with pytest.raises(HvnetError, match=r"kvm1: cannot read .*vb\.pcap0: .*No such file"):
        fetch.fetch(Elsewhere(), "kvm1", "vb", src, [("vb.pcap0", 1)], tmp_path / "here")
    assert list((tmp_path / "here").iterdir()) == []


def test_a_name_that_is_not_the_captures_pcap_fetches_nothing(tmp_path: Path) -> None:
    src = source(tmp_path, {"vb.pcap0": b"x"})
    with pytest.raises(HvnetError, match="not its pcaps"):
        fetch.fetch(Elsewhere(), "kvm1", "vb", src, [("vb.pcap0", 1), ("../../etc/passwd", 1)], tmp_path / "here")
    assert not (tmp_path / "here").exists()


def test_a_file_already_here_is_never_overwritten(tmp_path: Path) -> None:
    src = source(tmp_path, {"vb.pcap0": b"new"})
    out = tmp_path / "here"
    out.mkdir()
    (out / "vb.pcap0").write_bytes(b"mine")
    os.symlink("/nonexistent", out / "vb.pcap1")
    with pytest.raises(UsageError, match=r"already has vb\.pcap0, vb\.pcap1"):
        fetch.fetch(Elsewhere(), "kvm1", "vb", src, [("vb.pcap0", 3), ("vb.pcap1", 0)], out)
    assert (out / "vb.pcap0").read_bytes() == b"mine"


def test_a_local_capture_is_copied_from_its_directory(tmp_path: Path) -> None:
    src = source(tmp_path, {"vb.pcap": b"abc"})
    done = fetch.fetch(LocalRunner(), "this machine", "vb", src, [("vb.pcap", 3)], tmp_path / "out")
    assert (tmp_path / "out" / "vb.pcap").read_bytes() == b"abc" and done.source == str(src)
