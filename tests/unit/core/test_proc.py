"""Failures of a program that are not its exit status still arrive as hvnet's CommandFailed: output that
is not UTF-8 (printf writing byte 0xff) and an argument list the kernel refuses (E2BIG), both from real
programs, locally and as the SSH runner reports them."""

from __future__ import annotations

import os

import pytest

from appliance.core import proc
from appliance.core.errors import CommandFailed, CommandTimedOut, HvnetError
from appliance.core.runner import LocalRunner


def test_output_that_is_not_utf8_is_a_command_failure() -> None:
    for check in (True, False):
        with pytest.raises(CommandFailed) as err:
            proc.run(["printf", "ok \\377\\n"], check=check)
        assert "not UTF-8" in str(err.value) and "printf" in str(err.value)
        assert isinstance(err.value, HvnetError)


def test_an_argument_list_too_long_is_a_command_failure() -> None:
    huge = "x" * (os.sysconf("SC_ARG_MAX") + 1)
    with pytest.raises(CommandFailed) as err:
        LocalRunner().run(["echo", huge])
    text = str(err.value)
    assert "could not be started: Argument list too long" in text
    assert len(text) < 1000 and f"({len(huge)} characters)" in text  # the argument is not repeated whole


def test_a_timeout_is_still_told_apart() -> None:
    with pytest.raises(CommandTimedOut) as err:
        proc.run(["sleep", "5"], timeout=0.2)
    assert "no result within 0.2 s" in str(err.value)
