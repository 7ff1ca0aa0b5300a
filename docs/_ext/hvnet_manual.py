"""Sphinx directives that write the manual's tables from hvnet's own code.

The man pages must not fall behind the program, so what the code already holds as data is
rendered from it, never copied: the verbs and their one-line help (the parser), the exit codes
(``appliance.core.errors.EXIT_CODES``), the settings of hvnet.conf with their variables and
defaults (``appliance.core.config.SETTINGS``).  The per-command pages are sphinx-argparse's
``argparse`` directive over the same parser; this module adds what it does not do.

``manual-toctree`` is Sphinx's ``toctree`` with ``:glob:`` whose patterns may match nothing:
the manual's sections are filled in page by page, and a section with no page yet must not
fail a build run with warnings as errors.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.directives.other import TocTree
from sphinx.util import docname_join
from sphinx.util.docutils import SphinxDirective
from sphinx.util.matching import patfilter

# HVNET_* variables hvnet reads that are not settings of hvnet.conf: what each is for.
# tests/unit/docs/test_build.py checks every HVNET_ name the code holds is here or in SETTINGS.
OTHER_VARIABLES = (
    ("HVNET_CONFIG", "the configuration file to read instead of /etc/hvnet/hvnet.conf"),
    ("HVNET_STOP_AT", "a fault drill: stop (SIGSTOP) an apply at this step; for testing recovery, never in production"),
    ("HVNET_VM_ACCEL", "the lab's QEMU guests: kvm or tcg, instead of what the host is found to support"),
    ("HVNET_GEXEC_CPU", "set by hvnet in a lab guest's command environment (internal)"),
    ("HVNET_GEXEC_READY_TIMEOUT", "seconds a lab guest's command runner waits for its guest agent (default 120)"),
    ("HVNET_LAB_RUN_DIR", "set by the lab in the environment of the daemons it starts, to know them again (internal)"),
    ("HVNET_ENDPOINT", "set by hvnet in the environment of a measurement's remote processes (internal)"),
)


def public_verbs(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(verb, one-line help) of every top-level verb an operator types; the hidden ones have no help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action._get_subactions():
                if sub.help and sub.help != argparse.SUPPRESS:
                    yield sub.dest, sub.help


def _definitions(items: Iterable[tuple[str, str]]) -> nodes.definition_list:
    """A definition list of (term, text): the man builder makes it .TP entries, terms in bold."""
    dl = nodes.definition_list()
    for term, text in items:
        item = nodes.definition_list_item()
        item += nodes.term("", "", nodes.literal(term, term))
        item += nodes.definition("", nodes.paragraph(text, text))
        dl += item
    return dl


class Verbs(SphinxDirective):
    """Every top-level verb, its help, and the page that documents it."""

    def run(self) -> list[nodes.Node]:
        from appliance.cli.main import build_parser

        items = [(f"hvnet {verb}", f"{text} -- hvnet-{verb}(8)") for verb, text in public_verbs(build_parser())]
        return [_definitions(items)]


class ExitCodes(SphinxDirective):
    """Every exit code and its meaning, then the order of the multi-host verbs' worst-of."""

    def run(self) -> list[nodes.Node]:
        from appliance.core.errors import EXIT_CODES, HOSTS_EXIT_HELP

        order = HOSTS_EXIT_HELP[0].upper() + HOSTS_EXIT_HELP[1:] + "."
        return [_definitions((str(e.code), e.meaning) for e in EXIT_CODES), nodes.paragraph(order, order)]


class Environment(SphinxDirective):
    """Every HVNET_* variable: the settings' (with their hvnet.conf key), then the others."""

    def run(self) -> list[nodes.Node]:
        from appliance.core.config import SETTINGS

        items = [(s.env, f"{s.help} (hvnet.conf [{s.section}] {s.key}"
                  + (f"; the flag {s.flag} wins" if s.flag else "") + ")") for s in SETTINGS]  # fmt: skip
        return [_definitions([*items, *OTHER_VARIABLES])]


class Settings(SphinxDirective):
    """hvnet.conf's keys, section by section: key, variable, default, meaning, flag."""

    def run(self) -> list[nodes.Node]:
        from appliance.core.config import SECTIONS, SETTINGS

        out: list[nodes.Node] = []
        for section in SECTIONS:
            text = f"[{section}]"
            out.append(nodes.rubric(text, text))
            items = []
            for s in (s for s in SETTINGS if s.section == section):
                default = f"default {s.default}" if s.default is not None else "no default"
                also = "".join(f", ${v}" for v in s.also_env)
                flag = f"; flag {s.flag}" if s.flag else ""
                items.append((s.key, f"{s.help}. ${s.env}{also}{flag}; {default}."))
            out.append(_definitions(items))
        return out


def plain_text(elements: list[object], markdown_help: bool = False, settings: object = None) -> list[nodes.Node]:
    """hvnet's help texts as the plain text they are, for sphinx-argparse (its ``render_list``).

    sphinx-argparse parses every help text as reStructuredText, each in a document of its own
    whose warnings bypass Sphinx's (so ``-W`` misses them): ``vlan-tests/*.yaml`` became an
    unterminated emphasis and ``--db`` text with backquotes would be markup.  The texts are what
    ``--help`` prints, so they are shown as such: a paragraph per block, an indented block (a
    table of the epilog) as a literal block.
    """
    out: list[nodes.Node] = []
    for element in elements:
        if not isinstance(element, str):
            out += element  # sphinx-argparse's own nodes (a definition from the page's content)
            continue
        for block in element.split("\n\n"):
            if not block.strip():
                continue
            if any(ln.startswith((" ", "\t")) for ln in block.splitlines()):
                out.append(nodes.literal_block(block, block))
            else:
                text = " ".join(block.split())
                out.append(nodes.paragraph(text, text))
    return out


class ManualTocTree(TocTree):
    """``toctree`` whose glob patterns that match no page yet are left out rather than warned about."""

    def run(self) -> list[nodes.Node]:
        if "glob" in self.options:
            docs = sorted(self.env.found_docs)
            here = self.env.docname
            kept = [ln for ln in self.content if not ln.strip() or patfilter(docs, docname_join(here, ln.strip()))]
            self.content = StringList(kept, self.content.source(0) if self.content else None)
        return super().run()


def setup(app: Sphinx) -> dict[str, object]:
    import sphinxarg.ext

    sphinxarg.ext.render_list = plain_text  # pinned: sphinx-argparse 0.6.1 (pyproject.toml)
    app.add_directive("hvnet-verbs", Verbs)
    app.add_directive("hvnet-exit-codes", ExitCodes)
    app.add_directive("hvnet-environment", Environment)
    app.add_directive("hvnet-settings", Settings)
    app.add_directive("manual-toctree", ManualTocTree)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
