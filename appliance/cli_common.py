"""Plumbing shared by the command-line modules."""

from __future__ import annotations

import argparse
import importlib
from typing import Callable


def lazy(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command whose module is imported only when it runs (start-up loads what the verb needs)."""

    def call(args: argparse.Namespace) -> int:
        return int(getattr(importlib.import_module(f"{__package__}.{module}"), name)(args))

    call.__name__ = name
    return call
