"""The remote endpoint shell's text and what it prints, parsed (pure parts of appliance.endpoints)."""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from appliance.core.errors import UsageError
from appliance.endpoints import Job, JobResult, check_name, spread_ms
from appliance.endpoints.remote import CONTROL, JOB, SERVE, parse_sections, parse_stamp, script

HOSTILE = ["a b", "$(touch /tmp/x)", "`id`", "'", '"', "\\", "\n", "*", ";rm -rf /;", "", "-n", "ip netns exec"]


def _words_as_the_shell_reads_them(text: str) -> list[list[str]]:
    """The job lines of a generated script, run by the real sh with ``job`` printing its arguments."""
    jline = f"J={shlex.quote(JOB)}"
    chunk = text[text.index(jline) + len(jline) : text.rindex(SERVE)]
    show = 'job() { for w; do printf "%s\\0" "$w"; done; printf "\\1"; }\n'
    out = subprocess.run(["sh", "-c", show + chunk], capture_output=True, check=True).stdout.decode()
    return [rec.split("\0")[:-1] for rec in out.split("\1")[:-1]]


def test_every_word_of_a_job_reaches_the_shell_as_one_word() -> None:
    jobs = [Job("j0", ("netperf", *HOSTILE), netns="ns with 'quote' $(x)"), Job("j1", ("true",))]
    text = script(jobs)
    assert _words_as_the_shell_reads_them(text) == [
        ["j0", "ns with 'quote' $(x)", "netperf", *HOSTILE],
        ["j1", "", "true"],
    ]
    # the fixed parts are verbatim: nothing of a job reaches them
    assert text.startswith(CONTROL) and text.endswith(SERVE)


def test_a_jobs_environment_goes_through_env_as_quoted_words() -> None:
    text = script([Job("j", ("sh", "-c", "x"), env={"X": "$(id) 'a'"})])
    assert _words_as_the_shell_reads_them(text) == [["j", "", "env", "X=$(id) 'a'", "sh", "-c", "x"]]


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_generated_script_parses_in_each_shell(shell: str) -> None:
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    text = script([Job("j0", ("netperf", *HOSTILE), netns="n"), Job("j1", ("true",))])
    res = subprocess.run([shell, "-n", "-c", text], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    res = subprocess.run([shell, "-n", "-c", JOB], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("bad", ["", "a b", "../x", "x/y", "$(id)", ".hidden", "a;b", "x" * 65, "é"])
def test_job_names_name_files_so_they_are_plain(bad: str) -> None:
    with pytest.raises(UsageError):
        check_name(bad)
    with pytest.raises(UsageError):
        Job(bad, ("true",))


def test_an_empty_argv_is_refused() -> None:
    with pytest.raises(ValueError):
        Job("x", ())


def test_stamps_are_date_nanoseconds_or_unknown() -> None:
    assert parse_stamp("1795745308357121738\n") == 1795745308357121738
    assert parse_stamp("1795745308.357121\n") == 1795745308357121000  # bash's $EPOCHREALTIME
    assert parse_stamp("1795745308,357121") == 1795745308357121000  # ... in a locale with a decimal comma
    assert parse_stamp("1795745308.") is None
    assert parse_stamp("17957.453.08") is None
    assert parse_stamp(None) is None
    assert parse_stamp("") is None
    assert parse_stamp("1795745308N\n") is None  # a date without %N
    assert parse_stamp("-5") is None
    assert parse_stamp("１２３４５６７８９０１２３４５６") is None  # digits, but not ASCII


def test_cat_sections_give_each_file_as_written() -> None:
    mark = "hvnet-0123456789abcdef"
    lines = [
        f"{mark} begin a.out",
        "THROUGHPUT=12.5",
        "",
        f"{mark} end a.out",  # a.out ended with a newline: "THROUGHPUT=12.5\n"
        f"{mark} begin a.err",
        "no newline",
        f"{mark} end a.err",
        f"{mark} begin empty.out",
        "",
        f"{mark} end empty.out",
        f"{mark} absent gone.err",
        f"{mark} begin tricky.err",
        "hvnet-other begin x",  # another marker is data
        f"{mark} end not-this-one",
        "",
        f"{mark} end tricky.err",
    ]
    got = parse_sections(lines, mark)
    assert got == {
        "a.out": "THROUGHPUT=12.5\n",
        "a.err": "no newline",
        "empty.out": "",
        "gone.err": None,
        "tricky.err": f"hvnet-other begin x\n{mark} end not-this-one\n",
    }


def test_spread_is_within_one_groups_stamps() -> None:
    class G:
        results = {"a": JobResult(started_ns=1_000_000_000), "b": JobResult(started_ns=1_004_500_000),
                   "c": JobResult()}  # fmt: skip

    assert spread_ms(G()) == 4.5  # type: ignore[arg-type]
    G.results = {"a": JobResult()}
    assert spread_ms(G()) is None  # type: ignore[arg-type]
