"""``hvnet completion bash|zsh``: shell completion generated from hvnet's own parser.

The scripts come from the parser (shtab), so a verb or flag added anywhere is
completed without touching this module.  Values that only the running system
knows -- bridges, ports, mirrors, captures, suites, runs, lab guests,
inventory hosts -- are listed by the hidden verb ``hvnet _complete KIND``
(:mod:`appliance.services.completion`), which the scripts call with the same
``hvnet`` the operator typed.  Which argument gets which list is decided here
from its metavar (``BR``, ``VIF``, ``GUEST``...) rather than in each verb's
definition, so the verbs' modules stay as they are.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import Any

from appliance.cli.common import lazy
from appliance.core.errors import EXIT_OK, HvnetError, MissingTool
from appliance.frontdoor.hosts import host_of, inventory_file

SHELLS = ("bash", "zsh")
# The lists the scripts ask ``hvnet _complete`` for; "files" and "dirs" are the shells' own.
KINDS = ("bridges", "ports", "mirrors", "captures", "suites", "runs", "guests", "hosts")
COMPLETE_TIMEOUT_S = 1.0  # a Tab that waits longer than this for the switch is worse than no list

# metavar -> what completes it.
BY_METAVAR = {
    "FILE": "files", "DIR": "dirs", "BR": "bridges", "BRIDGE": "bridges", "VIF": "ports", "PORT": "ports",
    "GUEST": "guests", "SUITE": "suites", "RUN": "runs", "BASE": "runs", "NEW": "runs",
    "NAME,NAME|GROUP|all": "hosts", "[USER@]NAME[:PORT]": "hosts",
}  # fmt: skip
# A NAME positional means the objects of its verb.
BY_VERB = {"hvnet mirror del": "mirrors", "hvnet capture stop": "captures", "hvnet capture show": "captures",
           "hvnet capture delete": "captures", "hvnet capture fetch": "captures"}  # fmt: skip
# Kinds whose names are also paths: the shell completes files (or directories) beside them.
WITH_PATHS = {"suites": "file", "runs": "dir"}


def _bash_function(kind: str) -> str:
    """The bash function completing ``kind``; its name says "file"/"dir" where shtab should treat words as paths."""
    return f"_hvnet_compgen_{kind}" + (f"_{WITH_PATHS[kind]}" if kind in WITH_PATHS else "")


def _bash_preamble() -> str:
    lines = [
        "# hvnet _complete KIND: the names that exist now (bridges, ports...), from the hvnet being completed",
        "_hvnet_names() {",
        "  local IFS=$'\\n'",
        '  compgen -W "$("${COMP_WORDS[0]}" _complete "$1" 2>/dev/null)" -- "$2"',
        "}",
    ]
    for kind in KINDS:
        extra = {"file": '; compgen -f -- "$1"', "dir": '; compgen -d -- "$1"'}.get(WITH_PATHS.get(kind, ""), "")
        lines.append(f'{_bash_function(kind)}() {{ _hvnet_names {kind} "$1"{extra}; }}')
    return "\n".join(lines)


def _zsh_preamble() -> str:
    lines = ["# hvnet _complete KIND: the names that exist now (bridges, ports...), from the hvnet being completed"]
    for kind in KINDS:
        paths = {"file": "; _files", "dir": "; _files -/"}.get(WITH_PATHS.get(kind, ""), "")
        lines.append(
            f"_hvnet_names_{kind}() {{ local -a names; "
            f'names=(${{(f)"$(hvnet _complete {kind} 2>/dev/null)"}}); '
            f"compadd -a names{paths}; }}"
        )
    return "\n".join(lines)


def _complete_spec(kind: str) -> Any:
    """shtab's ``.complete`` value for ``kind``: a shell function per shell, or a path choice."""
    import shtab

    if kind == "files":
        return shtab.FILE
    if kind == "dirs":
        return shtab.DIRECTORY
    return {"bash": _bash_function(kind), "zsh": f"_hvnet_names_{kind}"}


def _arguments(parser: argparse.ArgumentParser) -> Iterator[tuple[argparse.ArgumentParser, argparse.Action]]:
    """Every argument of ``parser`` and of its sub-commands, with the parser it belongs to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _arguments(sub)
        else:
            yield parser, action


def annotate(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Mark the arguments whose values the shell can list (by metavar, or by verb for NAME)."""
    for owner, action in _arguments(parser):
        kind = BY_VERB.get(owner.prog) if action.metavar == "NAME" else BY_METAVAR.get(str(action.metavar))
        if kind is not None and not action.choices:
            action.complete = _complete_spec(kind)  # type: ignore[attr-defined]
    return parser


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (bash or zsh) from hvnet's whole ``parser`` (a fresh one: it is marked)."""
    try:
        import shtab
    except ImportError:
        raise MissingTool("the shtab Python package is not installed", hint="pip install shtab==1.13.0 "
                          "(pinned in pyproject.toml; the RPM carries it)") from None  # fmt: skip
    annotate(parser)
    if shell == "zsh":  # a colon ends an _arguments message: HOST:PORT would cut the spec short
        for _owner, action in _arguments(parser):
            if isinstance(action.metavar, str):
                action.metavar = action.metavar.replace(":", "\\:")
    preamble = {"bash": _bash_preamble, "zsh": _zsh_preamble}[shell]()
    return shtab.complete(parser, shell=shell, preamble=preamble)


def cmd_completion(args: argparse.Namespace) -> int:
    print(script(args.shell, args.build_parser()), end="")
    return EXIT_OK


def names(kind: str, args: argparse.Namespace) -> list[str]:
    """What ``kind`` lists now (see :mod:`appliance.services.completion`)."""
    from appliance.core import labstate
    from appliance.services import completion as svc

    if kind in svc.SWITCH_KINDS:
        return svc.switch_names(host_of(args), kind, COMPLETE_TIMEOUT_S)
    if kind == "captures":
        return svc.capture_names(host_of(args))
    if kind == "runs":
        return svc.run_dirs(host_of(args))
    if kind == "suites":
        return svc.suite_names()
    if kind == "guests":
        return svc.lab_guests(labstate.lab_dir(os.environ))
    return svc.inventory_names(inventory_file())


def cmd_complete(args: argparse.Namespace) -> int:
    """One name a line; nothing (and no message) when the source is not there: a Tab must never print errors."""
    try:
        found = names(args.kind, args)
    except (HvnetError, OSError, ValueError):
        found = []
    print("\n".join(found))
    return EXIT_OK


def register(sub: Any, build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """``completion``, and the hidden ``_complete`` (no help: not listed, not completed).

    ``build_parser`` makes hvnet's whole parser, which the script is generated from (passed in: this
    module is part of that parser and does not import the one that builds it).
    """
    c = sub.add_parser(
        "completion",
        help="print the bash or zsh completion script (the RPM installs both)",
        description="Print a completion script generated from hvnet's parser. bash: "
        "'source <(hvnet completion bash)' or save it as /usr/share/bash-completion/completions/hvnet; zsh: "
        "save 'hvnet completion zsh' as _hvnet in a directory of $fpath.",
    )
    c.add_argument("shell", choices=SHELLS, help="the shell")
    c.set_defaults(func=lazy("appliance.cli.completion", "cmd_completion"), build_parser=build_parser)
    h = sub.add_parser("_complete")
    h.add_argument("kind", choices=KINDS)
    h.set_defaults(func=lazy("appliance.cli.completion", "cmd_complete"))
