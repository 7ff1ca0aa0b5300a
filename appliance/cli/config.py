"""``hvnet config show``: every setting's effective value and where it came from.

The settings, their order of precedence and the file's format are
:mod:`appliance.core.config`'s; this module only asks the front door for the
effective values (which knows what a running lab changes) and prints them.
"""

from __future__ import annotations

import argparse
from typing import Any

from appliance.core.errors import EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from appliance.core import config, documents, render
    from appliance.frontdoor.hosts import effective_settings

    path, named = config.config_path()
    file = config.load()  # a broken file stops here: file:line, exit 2
    rows = effective_settings(args)
    if args.json:
        render.print_json(documents.CONFIG.stamp({
            "file": str(path), "file_present": file.path is not None,
            "named_by": config.CONFIG_VARIABLE if named else None, "settings": [r.to_json() for r in rows],
        }))  # fmt: skip
        return EXIT_OK
    state = "" if file.path is not None else "  (absent: built-in defaults)"
    print(f"configuration file: {path}{state}" + (f"  (from ${config.CONFIG_VARIABLE})" if named else ""))
    print("order: flag, then environment variable, then the file, then the default\n")
    table = [[r.setting.name, r.value if r.value is not None else "(unset)", r.source, _names(r.setting)] for r in rows]
    print(render.table(["SETTING", "VALUE", "FROM", "VARIABLE / FLAG"], table))
    return EXIT_OK


def _names(setting: Any) -> str:
    return setting.env + (f" / {setting.flag}" if setting.flag else "")


def register(sub: Any) -> None:
    """``hvnet config show [--json]`` (the parser loads nothing of the configuration)."""
    p = sub.add_parser("config", help="hvnet's settings: the effective value of each and where it came from")
    cs = p.add_subparsers(dest="config_command", metavar="ACTION", required=True, parser_class=type(p))
    s = cs.add_parser(
        "show", help="every setting's value and what set it: a flag, a variable, hvnet.conf (file:line), the default"
    )
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=cmd_show)
