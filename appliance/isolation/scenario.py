"""Isolation scenarios (``vlan-tests/*.yaml``), validated whole before anything runs.

A scenario names the lab topology it runs on, the guests taking part,
optional VLAN settings and mirrors applied for the run (and undone after),
how many probes each guest sends per target, and the expectation: ``derive``
(computed from the VLAN configuration in force, mirror copies declared as
exceptions) or an explicit ``matrix`` of who hears whom (row hears column).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core import yamldoc
from appliance.core.errors import ConfigError, Problem
from appliance.core.vlan import vlan_id, vlan_list, vlan_mode
from appliance.endpoints.topology import Topology
from appliance.endpoints.topology import load as load_topology
from appliance.probes import spec as probe_spec
from appliance.probes.spec import ProbeSpec

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TOP = {"name", "description", "topology", "probes", "guests", "vlans", "mirrors", "probes_per_target", "expect"}
_VLAN_KEYS = {"tag", "trunks", "vlan_mode"}
_MIRROR_KEYS = {"name", "select_src", "select_dst", "select_all", "select_vlans", "output"}
_UNSET = object()


@dataclass(frozen=True)
class VlanOverride:
    """VLAN settings for one guest's port during the run (``_UNSET`` fields are left alone)."""

    guest: str
    tag: Any = _UNSET  # int, or None to clear the tag
    trunks: Any = _UNSET  # tuple of ints
    vlan_mode: Any = _UNSET  # str, or None to clear


@dataclass(frozen=True)
class MirrorDef:
    name: str
    output: str
    select_src: tuple[str, ...] = ()
    select_dst: tuple[str, ...] = ()
    select_all: bool = False
    select_vlans: tuple[int, ...] = ()


@dataclass
class Scenario:
    name: str
    file: str
    description: str
    topology: Topology
    guests: list[str]
    vlans: list[VlanOverride] = field(default_factory=list)
    mirrors: list[MirrorDef] = field(default_factory=list)
    probes_per_target: int = 1
    matrix: dict[tuple[str, str], str] | None = None  # None: derive
    guest_lines: dict[str, int] = field(default_factory=dict)  # where each guest is named, for later errors
    # Probe ports hvnet adds to the host's bridge as the check's senders and listeners (``probes:``).
    probes: tuple[ProbeSpec, ...] = ()

    @property
    def derive(self) -> bool:
        return self.matrix is None


def load(path: str | Path) -> Scenario:
    return from_document(yamldoc.load(path))


def _guest_list(value: Any, path: yamldoc.PathKey, known: set[str], bad) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        bad(path, "must be a list of guest names")
        return ()
    for i, g in enumerate(value):
        if g not in known:
            bad((*path, i), f"unknown guest {g!r}; guests: {', '.join(sorted(known))}")
    return tuple(value)


class _Problems:
    """Every problem found in one scenario, in the order found, each at its ``file:line: field``."""

    def __init__(self, doc: yamldoc.Document) -> None:
        self.doc = doc
        self.items: list[Problem] = []

    def bad(self, path: yamldoc.PathKey, message: str) -> None:
        self.items.append(self.doc.problem(path, message))

    def unknown_keys(self, mapping: dict[str, Any], path: yamldoc.PathKey, allowed: set[str]) -> None:
        self.items += self.doc.unknown_keys(mapping, path, allowed)


def from_document(doc: yamldoc.Document) -> Scenario:
    """The scenario a parsed document describes, or ConfigError listing every problem in it."""
    problems = _Problems(doc)
    data = doc.data
    if not isinstance(data, dict):
        raise ConfigError([doc.problem((), "a scenario is a mapping with 'topology' and 'expect'")])
    problems.unknown_keys(data, (), _TOP)

    default = re.sub(r"[^A-Za-z0-9._-]", "-", Path(doc.file).stem).lstrip("._-")[:64] or "scenario"
    name = data.get("name", default)
    if not isinstance(name, str) or not _NAME.match(name):
        # The name becomes part of the captures' directory: it must never be a path.
        problems.bad(("name",), "must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        name = "scenario"
    probes: tuple[ProbeSpec, ...] = ()
    if "probes" in data:  # senders and listeners hvnet adds to the host's bridge, not lab guests
        specs, found = probe_spec.parse(doc, data["probes"], ("probes",))
        problems.items += found
        probes = tuple(specs)
        topology = probe_spec.topology_of(specs, str(name), doc.file)
        for key in ("topology", "vlans", "mirrors"):
            if key in data:
                problems.bad((key,), f"a scenario on probes takes no {key}: each probe joins a VIF's VLAN "
                                     "('like') or a VLAN ('vlan') as its entry says")  # fmt: skip
    else:
        topology = _topology(doc, data.get("topology"), problems.items)
    known = {g.name for g in topology.guests}

    guests = list(_guest_list(data.get("guests", [g.name for g in topology.guests]), ("guests",), known, problems.bad))
    if len(guests) < 2:
        problems.bad(("guests",), "an isolation check needs at least two guests")
    if len(set(guests)) != len(guests):
        problems.bad(("guests",), "a guest is listed twice")
    vlans = _vlans(data.get("vlans", {}), known, problems)
    mirrors = _mirrors(data.get("mirrors", []), known, problems)
    if topology.ovn:
        # A pool's switching is OVN's logical network: the scenario checks it as the NB has it.
        for key in ("vlans", "mirrors"):
            if data.get(key):
                problems.bad((key,), f"on an OVN pool ({topology.file}) a port's network is its logical switch: "
                                     f"no {key} for the run; allowed: name, description, topology, guests, "
                                     "probes_per_target, expect")  # fmt: skip
    per_target = data.get("probes_per_target", 1)
    if isinstance(per_target, bool) or not isinstance(per_target, int) or not 1 <= per_target <= 100:
        problems.bad(("probes_per_target",), "must be an integer 1..100")
        per_target = 1
    matrix = _expectation(data.get("expect"), guests, problems.bad)

    if problems.items:
        raise ConfigError(problems.items)
    return Scenario(
        name=name,
        file=doc.file,
        description=str(data.get("description", "")),
        topology=topology,
        guests=guests,
        vlans=vlans,
        mirrors=mirrors,
        probes_per_target=per_target,
        matrix=matrix,
        guest_lines=_guest_lines(doc, data, guests),
        probes=probes,
    )


def _guest_lines(doc: yamldoc.Document, data: dict[str, Any], guests: list[str]) -> dict[str, int]:
    """The line naming each guest (its topology's line when the scenario lists none)."""
    if "guests" not in data:
        return {}
    return {g: line for i, g in enumerate(guests) for line in [doc.line(("guests", i))] if line is not None}


def _topology(doc: yamldoc.Document, topo_ref: Any, problems: list[Problem]) -> Topology:
    """The lab topology the scenario runs on, relative to its file.

    Guests are checked against it, so without a valid one nothing further can
    be checked: the problems found so far are reported with this one.
    """
    if not isinstance(topo_ref, str):
        raise ConfigError(
            [*problems, doc.problem(("topology",), "required: the lab topology file (relative to this file)")]
        )
    topo_path = (Path(doc.file).parent / topo_ref).resolve()
    try:
        return load_topology(topo_path)
    except ConfigError as exc:
        raise ConfigError(
            [*problems, doc.problem(("topology",), f"topology {topo_ref} is invalid: {exc.problems[0]}")]
        ) from None


def _vlans(raw_vlans: Any, known: set[str], problems: _Problems) -> list[VlanOverride]:
    """Per guest, the VLAN fields the run overrides; a bad field is reported and the others still apply."""
    if not isinstance(raw_vlans, dict):
        problems.bad(("vlans",), "must map guest names to {tag, trunks, vlan_mode}")
        return []
    vlans: list[VlanOverride] = []
    for guest, settings in raw_vlans.items():
        path: yamldoc.PathKey = ("vlans", guest)
        if guest not in known:
            problems.bad(path, f"unknown guest {guest!r}; guests: {', '.join(sorted(known))}")
            continue
        if not isinstance(settings, dict) or not settings:
            problems.bad(path, "must be a mapping with tag, trunks and/or vlan_mode")
            continue
        problems.unknown_keys(settings, path, _VLAN_KEYS)
        kwargs: dict[str, Any] = {}
        for key, value in settings.items():
            if key not in _VLAN_KEYS:
                continue
            try:
                if key == "tag":
                    kwargs["tag"] = None if value is None else vlan_id(value)
                elif key == "trunks":
                    kwargs["trunks"] = () if value is None else tuple(vlan_list(value))
                else:
                    kwargs["vlan_mode"] = None if value is None else vlan_mode(value)
            except ValueError as exc:
                problems.bad((*path, key), str(exc))
        vlans.append(VlanOverride(guest=guest, **kwargs))
    return vlans


def _mirrors(raw_mirrors: Any, known: set[str], problems: _Problems) -> list[MirrorDef]:
    """The mirrors set up for the run, names unique."""
    if not isinstance(raw_mirrors, list):
        problems.bad(("mirrors",), "must be a list of mirrors")
        return []
    mirrors: list[MirrorDef] = []
    seen_mirrors: set[str] = set()
    for i, rm in enumerate(raw_mirrors):
        mirror = _mirror(rm, ("mirrors", i), known, seen_mirrors, problems)
        if mirror is not None:
            mirrors.append(mirror)
    return mirrors


def _mirror(
    rm: Any, path: yamldoc.PathKey, known: set[str], seen_mirrors: set[str], problems: _Problems
) -> MirrorDef | None:
    """One mirror: a name, a guest receiving the copies, and a selection that does not include it."""
    if not isinstance(rm, dict):
        problems.bad(path, "each mirror is a mapping with name, output and a selection")
        return None
    problems.unknown_keys(rm, path, _MIRROR_KEYS)
    mname = rm.get("name")
    if not isinstance(mname, str) or not mname:
        problems.bad((*path, "name"), "required: the mirror's name")
        return None
    if mname in seen_mirrors:
        problems.bad((*path, "name"), f"duplicate mirror name {mname!r}")
    seen_mirrors.add(mname)
    output = rm.get("output")
    if output not in known:
        problems.bad(
            (*path, "output"),
            f"required: the guest whose VIF receives the copies; guests: {', '.join(sorted(known))}",
        )
        return None
    src = _guest_list(rm.get("select_src", []), (*path, "select_src"), known, problems.bad)
    dst = _guest_list(rm.get("select_dst", []), (*path, "select_dst"), known, problems.bad)
    select_all = rm.get("select_all", False)
    if not isinstance(select_all, bool):
        problems.bad((*path, "select_all"), "must be true or false")
        select_all = False
    try:
        svlans = tuple(vlan_list(rm["select_vlans"])) if rm.get("select_vlans") is not None else ()
    except ValueError as exc:
        problems.bad((*path, "select_vlans"), str(exc))
        svlans = ()
    if not (src or dst or select_all):
        problems.bad(path, "selects nothing: give select_src, select_dst or select_all: true")
    if output in src or output in dst:
        problems.bad((*path, "output"), f"output {output} is also a selected port; OVS would loop the copies")
    return MirrorDef(mname, output, src, dst, select_all, svlans)


def _expectation(expect: Any, guests: list[str], bad: Any) -> dict[tuple[str, str], str] | None:
    """``derive`` (None: computed from the VLANs in force) or the explicit matrix of who hears whom."""
    if expect == "derive":
        return None
    if isinstance(expect, dict) and set(expect) == {"matrix"} and isinstance(expect["matrix"], dict):
        return _matrix(expect["matrix"], guests, bad)
    bad(("expect",), "required: 'derive', or {matrix: {LISTENER: {SENDER: yes|no}}}")
    return None


def _matrix(raw: dict[Any, Any], guests: list[str], bad: Any) -> dict[tuple[str, str], str]:
    """Row hears column: every guest taking part maps every other one to yes or no, and no one else."""
    taking_part = set(guests)
    matrix: dict[tuple[str, str], str] = {}
    for listener in guests:
        row = raw.get(listener)
        if not isinstance(row, dict):
            bad(("expect", "matrix", listener) if listener in raw else ("expect", "matrix"),
                f"row {listener} missing: each guest maps every other guest to yes or no")  # fmt: skip
            continue
        for sender in guests:
            if sender == listener:
                continue
            value = row.get(sender)
            if value not in ("yes", "no"):
                bad(("expect", "matrix", listener, sender),
                    f"must be yes or no (does {listener} hear {sender}?), not {value!r}")  # fmt: skip
            else:
                matrix[(listener, sender)] = value
        for extra in set(row) - taking_part:
            bad(("expect", "matrix", listener, extra), f"{extra!r} is not a guest of this scenario")
    for extra in set(raw) - taking_part:
        bad(("expect", "matrix", extra), f"{extra!r} is not a guest of this scenario")
    return matrix
