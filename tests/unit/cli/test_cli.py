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
