"""hvnet(1), written from hvnet's own parser (``hvnet _manpage``; the RPM build runs it).

A generator of its own rather than argparse-manpage: the page wants every
verb down to ``mirror add`` with its options, the exit codes and the
environment variables the help texts name, and that is a walk over the
parser that argparse's formatter already does most of; argparse-manpage would
be one more pinned package in the RPM's build for a page laid out its way.
The page is generated, never edited, so it cannot fall behind the verbs.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Iterator

from appliance import __version__
from appliance.core.errors import EXIT_CODES, EXIT_OK, HOSTS_EXIT_HELP

SEE_ALSO = ("ovs-vsctl(8)", "ovsdb-server(1)", "ovs-vswitchd(8)", "tcpdump(8)", "netperf(1)")


def roff(text: str) -> str:
    """``text`` as roff running text: backslashes and hyphens escaped, no line starting a request."""
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + ln if ln.startswith((".", "'")) else ln for ln in out.splitlines())


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Every public verb, depth first: (``hvnet mirror add``, its help, its parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._get_subactions()}
            for name, sub in action.choices.items():
                if name in helps:  # no help: a verb hvnet runs itself (left out of the listing)
                    yield sub.prog, helps[name], sub
                    yield from _subcommands(sub)


def _arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if action.help != argparse.SUPPRESS and not isinstance(action, (argparse._SubParsersAction,
                                                                        argparse._HelpAction)):  # fmt: skip
            yield action


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """One ``.TP`` entry per argument: how it is written (bold names, italic values), then its help."""
    formatter = parser._get_formatter()
    lines = []
    for action in _arguments(parser):
        invocation = formatter._format_action_invocation(action)
        help_text = formatter._expand_help(action) if action.help else ""
        names = set(action.option_strings)
        words = [f"\\fB{roff(w)}\\fR" if w.rstrip(",") in names else f"\\fI{roff(w)}\\fR" for w in invocation.split()]
        lines += [".TP", " ".join(words), roff(help_text)]
    return lines


def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def _exit_codes() -> list[str]:
    """Every code and its meaning, then the worst-of order of the multi-host verbs: the table --help prints."""
    lines = [".SH EXIT STATUS"]
    for e in EXIT_CODES:
        lines += [".TP", f".B {e.code}", roff(e.meaning)]
    return [*lines, ".PP", roff(HOSTS_EXIT_HELP[0].upper() + HOSTS_EXIT_HELP[1:] + ".")]


def _environment(parser: argparse.ArgumentParser) -> list[str]:
    """The ``$HVNET_*`` variables the help texts name, each with the options that mention it."""
    found: dict[str, list[str]] = {}
    for prog, _help, sub in [("hvnet", "", parser), *_subcommands(parser)]:
        for action in _arguments(sub):
            for var in re.findall(r"\$(HVNET_[A-Z0-9_]+)", action.help or ""):
                where = f"{prog} {action.option_strings[0] if action.option_strings else action.metavar}"
                found.setdefault(var, []).append(where)
    lines = [".SH ENVIRONMENT"]
    for var, where in sorted(found.items()):
        lines += [".TP", f".B {roff(var)}", roff("see " + ", ".join(dict.fromkeys(where)))]
    return lines


def manpage(parser: argparse.ArgumentParser) -> str:
    """hvnet(1) in roff (man macros)."""
    when = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", time.time())))  # reproducible in a package build
    lines = [
        f'.TH HVNET 1 "{time.strftime("%Y-%m-%d", when)}" "hvnet {__version__}" "hvnet manual"',
        ".SH NAME",
        "hvnet \\- host networking for XenServer and KVM hypervisors on Open vSwitch",
        ".SH SYNOPSIS",
        ".B hvnet",
        "[\\fIglobal options\\fR] \\fICOMMAND\\fR [\\fIoptions\\fR]",
        ".SH DESCRIPTION",
        roff(parser.description or ""),
        ".PP",
        roff(parser.epilog.split("\n\n")[0] if parser.epilog else ""),
        ".PP",
        "Every command takes \\fB\\-h\\fR for its own help; \\fBhvnet completion bash|zsh\\fR prints a completion "
        "script.",
        ".SH GLOBAL OPTIONS",
        *_options(parser),
        ".SH COMMANDS",
    ]
    for prog, help_text, sub in _subcommands(parser):
        lines += [f'.SS "{roff(prog)}"', roff(help_text), ".PP", f"\\fB{roff(_usage(sub))}\\fR"]
        if sub.description:
            lines += [".PP", roff(sub.description)]
        lines += _options(sub)
    lines += _exit_codes()
    lines += _environment(parser)
    lines += [".SH SEE ALSO", ",\n".join(f".BR {roff(p.split('(')[0])} ({p.split('(')[1]}" for p in SEE_ALSO)]
    return "\n".join(lines) + "\n"


def cmd_manpage(args: argparse.Namespace) -> int:
    print(manpage(args.build_parser()), end="")
    return EXIT_OK
