"""Plumbing shared by the command-line modules."""

from __future__ import annotations

import argparse
import importlib
from typing import Callable

from appliance.core.errors import HOSTS_EXIT_HELP


def lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command whose module is imported only when it runs (start-up loads what the verb needs)."""

    def call(args: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(module), name)(args))

    call.__name__ = name
    return call


def add_hosts_option(p: argparse.ArgumentParser) -> None:
    """``--hosts`` and ``--host-timeout`` of the verbs that run on many hosts at once."""
    p.add_argument(
        "--hosts", metavar="NAME,NAME|GROUP|all",
        help="run on these inventory hosts in parallel, each on its own (not with --host/--db); "
        + HOSTS_EXIT_HELP,
    )  # fmt: skip
    p.add_argument(
        "--host-timeout", type=float, default=300.0, metavar="S",
        help="with --hosts: give up on a host still busy after S seconds (default 300)",
    )  # fmt: skip
