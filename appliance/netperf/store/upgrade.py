"""Older ``results.json`` files read as the current version: stored runs keep loading.

A version only changes when a key is renamed or its unit changes; each step
from one version to the next is a pure function of the document, so a run
saved by any earlier hvnet is reported, compared (``hvnet suite compare OLD
NEW``) and re-saved as this one writes it.

* 1 -> 2: the ingress policing in force (``steps[].policing`` and
  ``meta.setup.policing``) spells its units the way every other JSON key
  does: ``rate_kbps`` -> ``rate_bits_per_s`` and ``burst_kbit`` ->
  ``burst_bits``, the values times 1000 (integers stay integers).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from appliance.core.documents import SUITE_RESULTS

Json = dict[str, Any]

CURRENT = SUITE_RESULTS.version
# a renamed key, its new name and the factor its value is multiplied by
POLICING_1_TO_2 = (("rate_kbps", "rate_bits_per_s", 1000), ("burst_kbit", "burst_bits", 1000))


def renamed(doc: Json, renames: tuple[tuple[str, str, int], ...]) -> Json:
    """``doc`` with each old key renamed in place (same position) and its value scaled; others untouched."""
    out: Json = {}
    table = {old: (new, factor) for old, new, factor in renames}
    for key, value in doc.items():
        if key in table:
            new, factor = table[key]
            scalable = isinstance(value, (int, float)) and not isinstance(value, bool)
            out[new] = value * factor if scalable else value
        else:
            out[key] = value
    return out


def _policing(value: Any) -> Any:
    return renamed(value, POLICING_1_TO_2) if isinstance(value, dict) else value


def _one_to_two(doc: Json) -> Json:
    """A hand-edited or damaged document is upgraded where its shape allows; the loader refuses the rest."""
    steps = doc.get("steps")
    for step in steps if isinstance(steps, list) else []:
        if isinstance(step, dict) and "policing" in step:
            step["policing"] = _policing(step["policing"])
    meta = doc.get("meta")
    setup = meta.get("setup") if isinstance(meta, dict) else None
    if isinstance(setup, dict) and "policing" in setup:
        setup["policing"] = _policing(setup["policing"])
    doc["version"] = 2
    return doc


STEPS: dict[int, Callable[[Json], Json]] = {1: _one_to_two}  # version -> to the next one


def upgrade(doc: Json) -> Json:
    """``doc`` (a results document of any known version) as version :data:`CURRENT`; ``doc`` is not changed.

    Raises ``ValueError`` on a version this hvnet does not know (a newer one: the reader must be upgraded).
    """
    version = doc.get("version")
    if version == CURRENT:
        return doc
    if version not in STEPS:
        raise ValueError(f"results version {version!r}; this hvnet reads versions 1 to {CURRENT}")
    out = copy.deepcopy(doc)
    while out["version"] != CURRENT:
        out = STEPS[out["version"]](out)
    return out
