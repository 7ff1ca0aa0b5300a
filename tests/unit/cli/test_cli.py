import argparse

from appliance import __version__
from appliance.cli.main import build_parser, main


def test_help_lists_every_subcommand_and_exit_codes(capsys) -> None:
    help_text = build_parser().format_help()
    for cmd in ("status", "lab", "tui"):
        assert f"    {cmd} " in help_text
    assert "exit codes:" in help_text and "3  the OVS database or the host (over SSH) could not be reached" in help_text
    assert "7  a check found no difference but could not decide everything" in help_text


def test_version(capsys) -> None:
    try:
        main(["--version"])
    except SystemExit as exc:
        assert exc.code == 0
    assert capsys.readouterr().out.strip() == f"hvnet {__version__}"


def test_bad_arguments_exit_2(capsys) -> None:
    try:
        main(["status", "--rates", "-1"])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert "--rates" in err and "between 0 and 3600" in err


def test_invalid_db_target_exit_2(capsys) -> None:
    assert main(["--db", "nonsense", "status"]) == 2
    assert "invalid OVSDB target 'nonsense'" in capsys.readouterr().err


def _parsed(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, object]:
    """What a command line parses to, lazily loaded commands by name (each build makes new ones)."""
    return {k: getattr(v, "__name__", v) if callable(v) else v for k, v in vars(parser.parse_args(argv)).items()}


def test_a_command_line_builds_the_parser_of_its_verbs_only() -> None:
    """The verbs a command line does not name are listed, not built: the same help, the same parse."""
    assert build_parser(["--help"]).format_help() == build_parser().format_help()
    assert build_parser(["status"]).format_usage() == build_parser().format_usage()
    for argv in (
        ["--db", "unix:/x", "status", "--json", "--all"],
        ["lab", "up", "--json"],
        ["isolation", "audit", "FILE"],
        ["--host", "status", "tap", "list"],
        ["capture", "list"],
        ["completion", "bash"],
    ):
        assert _parsed(build_parser(argv), argv) == _parsed(build_parser(), argv), argv
    verbs = next(a for a in build_parser(["status"])._actions if a.dest == "command")
    assert isinstance(verbs.choices["status"], argparse.ArgumentParser)
    assert not isinstance(verbs.choices["lab"], argparse.ArgumentParser)  # listed, nothing of it built
