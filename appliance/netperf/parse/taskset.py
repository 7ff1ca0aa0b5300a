"""``taskset -p -c`` output: each thread's CPU affinity as the kernel reports it.

``taskset -a -p -c PID`` prints one line per thread of the process::

    pid 803's current affinity list: 0,1

and, when it sets a list, a second line per thread with ``new`` in place of
``current``.  Thread IDs are PIDs to the scheduler, so a thread's saved list
is given back to it with ``taskset -p -c LIST TID``.
"""

from __future__ import annotations

import re

_LINE = re.compile(r"^pid (\d+)'s (current|new) affinity list: ([0-9,-]+)\s*$")


def affinities(text: str, which: str = "current") -> dict[int, str]:
    """Thread id -> its CPU list (``which``: the ``current`` lines, or the ``new`` ones a set printed)."""
    out: dict[int, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m and m.group(2) == which:
            out[int(m.group(1))] = m.group(3)
    return out
