"""Errors hvnet expects, each carrying the exit code the CLI returns for it.

Expected failures (bad input, an unreachable database, a missing tool) are
raised as :class:`HvnetError` subclasses and printed as one clear message;
only genuine bugs reach the user as a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Exit codes: one meaning each, the same for every verb and front end.  ``hvnet --help``, hvnet(8)
# and the multi-host verbs' worst-of order are all written from :data:`EXIT_CODES` and :data:`SEVERITY`.
EXIT_OK = 0
EXIT_FAILED = 1  # the operation ran and failed (or a check found a difference)
EXIT_USAGE = 2  # invalid input: arguments, topology/policy/suite files
EXIT_UNREACHABLE = 3  # OVSDB, or the host holding it, could not be reached
EXIT_MISSING_TOOL = 4  # a required system tool (ovs-vsctl, ip, ...) is absent
EXIT_CONFLICT = 5  # the change conflicted with a concurrent one or timed out
EXIT_UNKNOWN = 6  # whether the change was made could not be known (see the audit log)
EXIT_UNDECIDED = 7  # a check ran, found no difference, but could not decide everything it was asked


@dataclass(frozen=True)
class ExitCode:
    """One exit code: its number, what it means, and its words in the multi-host order and table."""

    code: int
    meaning: str  # the --help and hvnet(8) line
    short: str  # in the --hosts worst-of order
    word: str  # a host's RESULT cell in a multi-host table


EXIT_CODES = (
    ExitCode(EXIT_OK, "success", "ok", "ok"),
    ExitCode(EXIT_FAILED, "the operation failed, or a check found a difference", "failed, or drift", "failed"),
    ExitCode(EXIT_USAGE, "invalid input (arguments, topology or policy file); nothing was changed", "invalid",
             "invalid"),
    ExitCode(EXIT_UNREACHABLE, "the OVS database or the host (over SSH) could not be reached", "unreachable",
             "unreachable"),
    ExitCode(EXIT_MISSING_TOOL, "a required system tool is missing", "missing tool", "missing tool"),
    ExitCode(EXIT_CONFLICT, "a concurrent change or a timeout prevented the operation (nothing was changed)",
             "conflict", "conflict"),
    ExitCode(EXIT_UNKNOWN, "whether the change was made could not be known; the next hvnet run settles it",
             "outcome unknown", "UNKNOWN"),
    ExitCode(EXIT_UNDECIDED, "a check found no difference but could not decide everything (an isolation cell)",
             "undecided", "undecided"),
)  # fmt: skip
BY_CODE = {e.code: e for e in EXIT_CODES}

# The worst-of order of a fan-out (``--hosts``, ``hvnet hosts``), most severe first: what the operator
# must look at before anything else.  An unknown outcome (6) leaves a host in a state nobody knows; a
# conflict (5) means someone else changes that host right now; an unreachable host (3) got nothing and
# says nothing; a missing tool (4) is a fix on one host; a failure or a difference (1) is a finding; an
# undecided check (7) found nothing but did not see everything -- below 1 because a finding outranks
# an undecided answer within one check too, so the hosts' worst agrees with one check over all of
# them; a host-specific usage error (2) changed nothing.
SEVERITY = (EXIT_UNKNOWN, EXIT_CONFLICT, EXIT_UNREACHABLE, EXIT_MISSING_TOOL, EXIT_FAILED, EXIT_UNDECIDED,
            EXIT_USAGE, EXIT_OK)  # fmt: skip


def exit_word(code: int) -> str:
    """A host's RESULT cell for ``code`` in a multi-host table (``exit N`` for a code hvnet does not define)."""
    return BY_CODE[code].word if code in BY_CODE else f"exit {code}"


def worst_exit(codes: Iterable[int]) -> int:
    """The most severe of ``codes`` in :data:`SEVERITY` order (0 for none); an undefined code counts as worst."""
    rank = {code: i for i, code in enumerate(SEVERITY)}
    return min(codes, key=lambda c: rank.get(c, -1), default=EXIT_OK)


EXIT_CODES_HELP = "exit codes:\n" + "\n".join(f"  {e.code}  {e.meaning}" for e in EXIT_CODES)
HOSTS_EXIT_HELP = "on many hosts (--hosts, hvnet hosts) the exit code is the worst host's, most severe first: " + (
    ", ".join(f"{c} ({BY_CODE[c].short})" if c != EXIT_OK else "0" for c in SEVERITY)
)


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


def error_json(
    message: str, exit_code: int, *, kind: str, hint: str | None = None, problems: Iterable[Problem] = ()
) -> dict[str, object]:
    """A failure as ``--json`` reports it on stderr: what the text says, plus the exit code and its meaning.

    ``kind`` names the failure for a script to branch on (the error's class, ``UsageError`` for
    arguments argparse refused); ``meaning`` is the exit code's word of the table above.  A file's
    problems come one by one, each with its file, line and field, as the text lists them.
    """
    out: dict[str, object] = {"message": message, "hint": hint, "exit_code": exit_code, "kind": kind,
                              "meaning": exit_word(exit_code)}  # fmt: skip
    listed = [{"file": p.file, "line": p.line, "field": p.field, "message": p.message} for p in problems]
    if listed:
        out["problems"] = listed
    return {"error": out}


def hvnet_error_json(exc: HvnetError) -> dict[str, object]:
    """:func:`error_json` of an :class:`HvnetError`."""
    return error_json(exc.message, exc.exit_code, kind=type(exc).__name__, hint=exc.hint,
                      problems=getattr(exc, "problems", ()))  # fmt: skip
