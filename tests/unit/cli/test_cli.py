import argparse
import importlib

from appliance import __version__
from appliance.cli import main as main_module
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


def test_verb_modules_lists_the_verbs_each_module_declares() -> None:
    """A command line naming none of a module's verbs does not load it: the list must say them all."""
    for module, verbs in main_module.VERB_MODULES.items():
        scratch = main_module._Parser(prog="hvnet")
        sub = scratch.add_subparsers(dest="command", parser_class=main_module._Parser, action=main_module._Verbs)
        declaring = importlib.import_module(module)
        declaring.register(sub, build_parser) if module.endswith(".completion") else declaring.register(sub)
        assert tuple(sub.choices) == verbs, module


def test_a_command_line_parses_the_same_without_the_verbs_it_does_not_name() -> None:
    for argv in (
        ["--db", "unix:/x", "status", "--json", "--all"],
        ["--host", "status", "tap", "list"],
        ["isolation", "check", "FILE"],
        ["isolation", "audit", "--json"],
        ["plan", "FILE"],
        ["sflow", "clear", "br0"],
        ["completion", "bash"],
        [],
    ):
        assert _parsed(build_parser(argv, only_named=True), argv) == _parsed(build_parser(), argv), argv
    verbs = next(a for a in build_parser(["status"], only_named=True)._actions if a.dest == "command")
    assert "status" in verbs.choices and "lab" in verbs.choices and "plan" not in verbs.choices


def test_help_and_errors_list_every_verb_though_the_verb_is_named(capsys) -> None:
    """What the parser of the named verbs only would print (help, an error) the whole one prints."""
    for argv, listed in (
        (["--help", "status"], ("capture", "sflow")),
        (["--db", "status", "statu"], ("capture", "sflow")),  # an invalid choice: the choices are listed
        (["isolation", "--help"], ("audit",)),
    ):
        try:
            main(argv)
        except SystemExit:
            pass
        out = capsys.readouterr()
        assert all(word in out.out + out.err for word in listed), argv
