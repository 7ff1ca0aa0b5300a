"""Errors hvnet expects, each carrying the exit code the CLI returns for it.

Expected failures (bad input, an unreachable database, a missing tool) are
raised as :class:`HvnetError` subclasses and printed as one clear message;
only genuine bugs reach the user as a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass

# Exit codes, documented in ``hvnet --help``.
EXIT_OK = 0
EXIT_FAILED = 1  # the operation ran and failed (or a check found a difference)
EXIT_USAGE = 2  # invalid input: arguments, topology/policy/suite files
EXIT_UNREACHABLE = 3  # OVSDB could not be reached
EXIT_MISSING_TOOL = 4  # a required system tool (ovs-vsctl, ip, ...) is absent
EXIT_CONFLICT = 5  # the change conflicted with a concurrent one or timed out
EXIT_UNKNOWN = 6  # whether the change was made could not be known (see the audit log)

EXIT_CODES_HELP = """\
exit codes:
  0  success
  1  the operation failed, or a check found a difference
  2  invalid input (arguments, topology or policy file); nothing was changed
  3  the OVS database could not be reached
  4  a required system tool is missing
  5  a concurrent change or a timeout prevented the operation (nothing was changed)
  6  whether the change was made could not be known; the next hvnet run settles it"""


class HvnetError(Exception):
    """Base class of the failures hvnet reports without a traceback."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message}\n  hint: {self.hint}"
        return self.message


class UsageError(HvnetError):
    """A command-line argument is invalid."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Problem:
    """One validation finding: where it is and what is allowed there."""

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}"


class ConfigError(HvnetError):
    """A configuration file (topology, policy, suite, scenario) is invalid.

    Carries every problem found, so the operator fixes the file in one pass
    instead of one error per run.
    """

    exit_code = EXIT_USAGE

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        head = lines[0] if len(lines) == 1 else f"{len(lines)} problems:\n  " + "\n  ".join(lines)
        super().__init__(head)


class OvsdbUnreachable(HvnetError):
    """The OVS database did not answer at the resolved target."""

    exit_code = EXIT_UNREACHABLE


class OvsdbError(HvnetError):
    """OVSDB rejected a transaction (constraint violation, bad reference...)."""


class ConflictError(HvnetError):
    """A transaction kept conflicting with concurrent changes, or timed out."""

    exit_code = EXIT_CONFLICT
    unsure: list[int] = []  # attempts (1-based) whose commit may have gone through nonetheless


class MissingTool(HvnetError):
    """A system program hvnet needs is not installed."""

    exit_code = EXIT_MISSING_TOOL


class CommandFailed(HvnetError):
    """A system program hvnet ran exited non-zero."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
        super().__init__(f"{' '.join(argv)} failed (exit {returncode}): {detail}")
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr


class CommandTimedOut(CommandFailed):
    """A system program gave no result within its timeout (and was killed)."""


class LabError(HvnetError):
    """The lab could not be brought up or down as asked."""


class OutcomeUnknown(HvnetError):
    """A commit was sent and no answer came: the change may or may not be in the database.

    Never reported as "prevented": the intent stays in the journal and the
    next hvnet process that reaches the database settles it (audit line,
    rollback record) by reading what is there.
    """

    exit_code = EXIT_UNKNOWN
