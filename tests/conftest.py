"""What every test may use: the project's root, the ``hvnet`` command, and the machine's namespaces and links.

The lab's fixtures (a private ovsdb-server, the built-in lab on real OVS) are in
``tests/lab/conftest.py``: a unit test run loads no lab code.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


HVNET = [sys.executable, "-m", "appliance"]


def run_hvnet(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real ``hvnet`` CLI in a subprocess (as an operator would)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [*HVNET, *args], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT, check=False
    )


def netns_list() -> set[str]:
    return set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()


def links() -> set[str]:
    return set(os.listdir("/sys/class/net"))
