"""``capture.json`` across versions: the keys it is written with, and older records read as the current version.

A capture's record is document ``hvnet.capture`` (:data:`appliance.core.documents.CAPTURE`).  Version 1
(``"format": 1``, no ``schema`` key) named its limits and disk figures after the command-line options
that set them (``rotate_mb``, ``duration``, ``buffer_kib``, ``worst_case``); version 2 says each unit
in the key, as every hvnet document does (``rotate_bytes``, ``duration_s``, ``buffer_bytes``,
``worst_case_bytes``), the values scaled to the new unit (exact: tcpdump's ``-C`` counts millions of bytes,
``-B`` KiB).

The code keeps the option's names and units (what tcpdump is given): :func:`to_document` writes a record's
internal form as the current version, :func:`from_document` reads any known version back, through
:func:`upgrade` -- a pure function of the document, like the suite results' upgrade -- so a capture started
by an older hvnet is still listed, shown, stopped and fetched.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from appliance.core.documents import CAPTURE

Json = dict[str, Any]
Renames = tuple[tuple[str, str, int], ...]

CURRENT = CAPTURE.version
# (version 1 key, version 2 key, the factor a version 1 value is multiplied by)
LIMITS_1_TO_2: Renames = (
    ("snaplen", "snaplen_bytes", 1), ("duration", "duration_s", 1), ("count", "count_packets", 1),
    ("rotate_mb", "rotate_bytes", 1_000_000), ("rotate_seconds", "rotate_s", 1),
    ("max_mb", "max_bytes", 1_000_000), ("buffer_kib", "buffer_bytes", 1024),
)  # fmt: skip
DISK_1_TO_2: Renames = (
    ("worst_case", "worst_case_bytes", 1), ("floor", "floor_bytes", 1), ("free_at_start", "free_at_start_bytes", 1),
    ("free_at_stop", "free_at_stop_bytes", 1), ("filesystem_size", "filesystem_bytes", 1),
    ("reserved_by_running", "reserved_by_running_bytes", 1),
)  # fmt: skip
CPU_1_TO_2: Renames = (("seconds", "cpu_s", 1), ("pct_of_core", "core_pct", 1))


def renamed(doc: Json, renames: Renames) -> Json:
    """``doc`` with each old key renamed in place (same position) and its value multiplied; others untouched."""
    table = {old: (new, factor) for old, new, factor in renames}
    out: Json = {}
    for key, value in doc.items():
        new, factor = table.get(key, (key, 1))
        scalable = factor != 1 and isinstance(value, (int, float)) and not isinstance(value, bool)
        out[new] = value * factor if scalable else value
    return out


def _back(doc: Json, renames: Renames) -> Json:
    """The inverse of :func:`renamed`: a value that is no whole number of the old unit is refused (ValueError)."""
    table = {new: (old, factor) for old, new, factor in renames}
    out: Json = {}
    for key, value in doc.items():
        old, factor = table.get(key, (key, 1))
        if factor != 1 and isinstance(value, (int, float)) and not isinstance(value, bool):
            if value % factor:
                raise ValueError(f"{key}: {value} is not a whole multiple of {factor}")
            value = int(value // factor)
        out[old] = value
    return out


def _each(doc: Json, change: Callable[[Json, Renames], Json]) -> Json:
    """``doc`` with ``change`` applied to its limits, disk figures and tcpdump's CPU (where they are objects)."""
    out = dict(doc)
    spec = out.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("limits"), dict):
        out["spec"] = {**spec, "limits": change(spec["limits"], LIMITS_1_TO_2)}
    for key, renames in (("disk", DISK_1_TO_2), ("tcpdump_cpu", CPU_1_TO_2)):
        if isinstance(out.get(key), dict):
            out[key] = change(out[key], renames)
    return out


def _one_to_two(doc: Json) -> Json:
    out = _each({k: v for k, v in doc.items() if k != "format"}, renamed)
    return CAPTURE.stamp({k: v for k, v in out.items() if k not in ("schema", "version")})


STEPS: dict[int, Callable[[Json], Json]] = {1: _one_to_two}  # version -> to the next one


def version_of(doc: Json) -> Any:
    """A record's version: its ``version``, or 1 for one written before records named their schema."""
    return doc.get("version") if "schema" in doc else 1


def upgrade(doc: Json) -> Json:
    """``doc`` (a capture record of any known version) as version :data:`CURRENT`; ``doc`` is not changed.

    Raises ``ValueError`` for another document or a version this hvnet does not know (a newer one)."""
    if "schema" in doc and doc["schema"] != CAPTURE.name:
        raise ValueError(f"a {doc['schema']!r} document, not a capture record ({CAPTURE.name})")
    version = version_of(doc)
    if version == CURRENT:
        return doc
    if version not in STEPS:
        raise ValueError(f"capture record version {version!r}; this hvnet reads versions 1 to {CURRENT}")
    out = copy.deepcopy(doc)
    while version != CURRENT:
        out = STEPS[version](out)
        version = out["version"]
    return out


def to_document(internal: Json) -> Json:
    """A record's internal form (the options' names and units) as the current version writes it."""
    return CAPTURE.stamp(_each(internal, renamed))


def from_document(doc: Json) -> Json:
    """Any known version of a record as its internal form (ValueError: not one this hvnet reads)."""
    current = upgrade(doc)
    return _each({k: v for k, v in current.items() if k not in ("schema", "version")}, _back)
