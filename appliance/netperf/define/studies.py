"""The studies hvnet's suites reproduce, as data (``netperf-suites/studies/*.yaml``).

Each file transcribes a study's published table(s) -- numbers copied as the
study prints them, its headings and units kept -- with rows keyed the way a
run's steps are (test type, case, message or frame size, concurrency, offered
rate), and the conclusions the study draws, each with the figures that decide
it.  ``hvnet suite report RUN --against STUDY`` sets a run beside them
(:mod:`appliance.netperf.report.against`).  Like suites, the files are checked
whole when loaded: every problem names ``file:line`` and the field (exit 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from appliance.core import yamldoc
from appliance.core.errors import ConfigError, Problem, UsageError
from appliance.netperf.define.suite import SUITES_DIR
from appliance.netperf.define.tests import TEST_TYPES

STUDIES_DIR = SUITES_DIR / "studies"

# What a row or a conclusion's selector may name: a step's own fields (StepResult), offered as Mbit/s.
KEY_FIELDS = ("test", "type", "case", "message_size", "frame_size", "concurrency", "offered_mbps")
_INT_FIELDS = ("message_size", "frame_size", "concurrency")
# A step's figures a column or a conclusion may read: the Summary's means, its CPU means, lost instances.
FIGURES = (
    "mean", "sum", "received_mbps", "sent_mbps", "udp_loss_pct", "received_pps", "sent_pps", "monitor_pps",
    "monitor_mbps", "captured_ratio", "achieved_ratio", "mirrored_mbps", "arrived_mbps", "arrived_ratio",
    "flow_mean_mbps", "retransmissions", "cpu_vswitchd_pct_of_core", "cpu_host_pct", "lost",
)  # fmt: skip
# How a conclusion is decided from a run's figures (a, b: step selectors):
#   lower / higher: a's figure (mean over its steps) below / above b's
#   within: a's figure within ``tolerance`` (a fraction) of b's
#   steadier: a's spread over its steps, (max - min) / mean, below b's
#   no_loss: no instance lost in a's steps;  fewer_lost: a's steps lost fewer instances than b's
KINDS = ("lower", "higher", "within", "steadier", "no_loss", "fewer_lost")
_ONE_SIDED = ("no_loss",)

Key = dict[str, Union[str, int, float, list[Any]]]


@dataclass(frozen=True)
class Column:
    """One of the study's columns, and the run's figure it is set against."""

    heading: str  # as the study gives it
    unit: str  # as the study gives it ("none given" when it gives none)
    figure: str  # the step's figure (FIGURES)
    hvnet_unit: str  # the unit of that figure in hvnet's results
    scale: float = 1.0  # study's unit = hvnet's figure x scale (ratio -> %: 100)
    note: str = ""  # what the reader should know about the conversion

    def to_json(self) -> dict[str, Any]:
        return {"heading": self.heading, "unit": self.unit, "figure": self.figure, "hvnet_unit": self.hvnet_unit,
                "scale": self.scale, "note": self.note}  # fmt: skip


@dataclass(frozen=True)
class StudyRow:
    key: Key  # the table's key and the row's own fields together
    values: tuple[Optional[float], ...]  # one per column; None: the study gives no figure there
    label: str  # the study's name for the row (its capture engine ...), or its own key fields


@dataclass(frozen=True)
class Table:
    id: str
    title: str  # as the study gives it
    where: str  # the table or figure number, page, section
    suite: str  # the shipped suite that reproduces it
    columns: tuple[Column, ...]
    rows: tuple[StudyRow, ...]


@dataclass(frozen=True)
class Conclusion:
    claim: str
    study_figures: str  # the study's own figures that decide it ("none: Fig. 3 only" when it gives none)
    kind: str
    figure: str
    a: Key
    b: Optional[Key] = None
    tolerance: Optional[float] = None


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    year: Optional[int]  # None: the study's text gives none
    source: str  # the study's text, relative to the project's seeds
    file: str
    tables: tuple[Table, ...] = ()
    conclusions: tuple[Conclusion, ...] = field(default_factory=tuple)


def shipped() -> list[Path]:
    return sorted(STUDIES_DIR.glob("*.yaml"))


def names() -> list[str]:
    return [p.stem for p in shipped()]


def load_named(name: str) -> Study:
    """A shipped study by name (``seed-2010``); an unknown name is a usage error listing the known ones."""
    path = STUDIES_DIR / f"{name}.yaml"
    if "/" in name or not path.is_file():
        raise UsageError(f"no study named {name!r}", hint=f"known studies: {', '.join(names())}")
    return load(path)


def load(path: Union[str, Path]) -> Study:
    """Read and check a study file whole; every problem at once (ConfigError, exit 2)."""
    doc = yamldoc.load(path, strict=False)
    c = _Checker(doc)
    study = c.study()
    if c.problems:
        raise ConfigError(c.problems)
    assert study is not None
    return study


class _Checker:
    """Collects problems; small typed readers that report and return a fallback."""

    def __init__(self, doc: yamldoc.Document) -> None:
        self.doc = doc
        self.problems: list[Problem] = list(doc.problems)

    def bad(self, path: yamldoc.PathKey, message: str) -> None:
        self.problems.append(self.doc.problem(path, message))

    def mapping(self, value: Any, path: yamldoc.PathKey, allowed: set[str], required: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.bad(path, "expected a mapping")
            return {}
        self.problems += self.doc.unknown_keys(value, path, allowed)
        for k in sorted(required - set(value)):
            self.bad(path, f"missing key {k!r}")
        return value

    def text(self, m: dict[str, Any], path: yamldoc.PathKey, key: str, default: str = "") -> str:
        v = m.get(key, default)
        if not isinstance(v, str) or (key in m and not v.strip()):
            self.bad((*path, key), "expected non-empty text")
            return default
        return v

    def number(self, value: Any, path: yamldoc.PathKey, *, positive: bool = False) -> Optional[float]:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (positive and value <= 0):
            self.bad(path, "expected a positive number" if positive else "expected a number")
            return None
        return float(value)

    def study(self) -> Optional[Study]:
        top = self.mapping(self.doc.data, (), {"version", "name", "title", "year", "source", "tables", "conclusions"},
                           {"version", "name", "title", "year", "source"})  # fmt: skip
        if top.get("version", 1) != 1:
            self.bad(("version",), "only version 1 is known")
        year = top.get("year")
        if year is not None and (isinstance(year, bool) or not isinstance(year, int) or not 1990 <= year <= 2100):
            self.bad(("year",), "expected a year, 1990..2100 (null: the study's text gives none)")
        stem = Path(self.doc.file).stem
        name = self.text(top, (), "name", stem)
        if name != stem:
            self.bad(("name",), f"must be the file's name, {stem!r} (it is what --against takes)")
        tables = self.items(top, "tables", self.table)
        conclusions = self.items(top, "conclusions", self.conclusion)
        if not tables and not conclusions:
            self.bad((), "a study needs a table or a conclusion")
        if len({t.id for t in tables}) != len(tables):
            self.bad(("tables",), "table ids must be unique")
        if self.problems:
            return None
        return Study(name, top["title"], year, top["source"], self.doc.file, tuple(tables), tuple(conclusions))

    def items(self, top: dict[str, Any], key: str, read: Any) -> list[Any]:
        value = top.get(key, [])
        if not isinstance(value, list):
            self.bad((key,), "expected a list")
            return []
        out = [read(item, (key, i)) for i, item in enumerate(value)]
        return [x for x in out if x is not None]

    def table(self, value: Any, path: yamldoc.PathKey) -> Optional[Table]:
        m = self.mapping(value, path, {"id", "title", "where", "suite", "key", "columns", "rows"},
                         {"id", "title", "where", "suite", "columns", "rows"})  # fmt: skip
        suite = self.text(m, path, "suite")
        if suite and not (SUITES_DIR / f"{suite}.yaml").is_file():
            self.bad((*path, "suite"), f"no shipped suite {suite!r} in {SUITES_DIR.name}/")
        common = self.key(m.get("key", {}), (*path, "key"), partial=True)
        columns = [self.column(c, (*path, "columns", i)) for i, c in enumerate(self.seq(m, path, "columns"))]
        rows = [self.row(r, (*path, "rows", i), common, len(columns)) for i, r in enumerate(self.seq(m, path, "rows"))]
        if None in columns or None in rows:
            return None
        return Table(self.text(m, path, "id"), self.text(m, path, "title"), self.text(m, path, "where"), suite,
                     tuple(columns), tuple(rows))  # type: ignore[arg-type]  # fmt: skip

    def seq(self, m: dict[str, Any], path: yamldoc.PathKey, key: str) -> list[Any]:
        v = m.get(key, [])
        if not isinstance(v, list) or not v:
            self.bad((*path, key), "expected a non-empty list")
            return []
        return v

    def column(self, value: Any, path: yamldoc.PathKey) -> Optional[Column]:
        m = self.mapping(value, path, {"heading", "unit", "figure", "hvnet_unit", "scale", "note"},
                         {"heading", "unit", "figure", "hvnet_unit"})  # fmt: skip
        figure = self.figure(m.get("figure"), (*path, "figure"))
        scale = self.number(m.get("scale", 1), (*path, "scale"), positive=True)
        if not m or figure is None or scale is None:
            return None
        return Column(self.text(m, path, "heading"), self.text(m, path, "unit"), figure,
                      self.text(m, path, "hvnet_unit"), scale, self.text(m, path, "note"))  # fmt: skip

    def row(self, value: Any, path: yamldoc.PathKey, common: Key, width: int) -> Optional[StudyRow]:
        m = self.mapping(value, path, {*KEY_FIELDS, "values", "label"}, {"values"})
        own = self.key({k: v for k, v in m.items() if k in KEY_FIELDS}, path, partial=True)
        for k, v in {**common, **own}.items():
            if isinstance(v, list):
                self.bad((*path, k), "a row names one value per field (a list selects several steps)")
        values = m.get("values")
        if not isinstance(values, list) or len(values) != width:
            self.bad((*path, "values"), f"expected a list of {width} value(s), one per column (null: not given)")
            return None
        nums = [None if v is None else self.number(v, (*path, "values", i)) for i, v in enumerate(values)]
        label = self.text(m, path, "label") or " ".join(f"{k}={v}" for k, v in own.items())
        return StudyRow({**common, **own}, tuple(nums), label)

    def figure(self, value: Any, path: yamldoc.PathKey) -> Optional[str]:
        if value not in FIGURES:
            self.bad(path, f"unknown figure {value!r}; known: {', '.join(FIGURES)}")
            return None
        return str(value)

    def key(self, value: Any, path: yamldoc.PathKey, *, partial: bool) -> Key:
        m = self.mapping(value, path, set(KEY_FIELDS), set())
        for k, v in m.items():
            for one in v if isinstance(v, list) else [v]:
                self.key_value(k, one, (*path, k))
        if not partial and not m:
            self.bad(path, "select at least one step field: " + ", ".join(KEY_FIELDS))
        return dict(m)

    def key_value(self, k: str, v: Any, path: yamldoc.PathKey) -> None:
        if k == "type" and v not in TEST_TYPES:
            self.bad(path, f"unknown test type {v!r}; known: {', '.join(TEST_TYPES)}")
        elif k in _INT_FIELDS and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            self.bad(path, "expected a positive integer")
        elif k == "offered_mbps" and v is not None:  # null: unpaced (as fast as the generator can)
            self.number(v, path, positive=True)
        elif k in ("test", "case") and not isinstance(v, str):
            self.bad(path, "expected a name")

    def conclusion(self, value: Any, path: yamldoc.PathKey) -> Optional[Conclusion]:
        m = self.mapping(value, path, {"claim", "study_figures", "kind", "figure", "a", "b", "tolerance"},
                         {"claim", "study_figures", "kind", "a"})  # fmt: skip
        kind = m.get("kind")
        if kind not in KINDS:
            self.bad((*path, "kind"), f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
        lost = kind in ("no_loss", "fewer_lost")
        figure = "lost" if lost else self.figure(m.get("figure"), (*path, "figure"))
        if lost and "figure" in m:
            self.bad((*path, "figure"), f"{kind} reads lost instances; no figure")
        a = self.key(m.get("a"), (*path, "a"), partial=False)
        b = None
        if kind in _ONE_SIDED:
            if "b" in m:
                self.bad((*path, "b"), f"{kind} takes only a")
        else:
            b = self.key(m.get("b"), (*path, "b"), partial=False)
        tol = None
        if kind == "within":
            tol = self.number(m.get("tolerance"), (*path, "tolerance"), positive=True)
        elif "tolerance" in m:
            self.bad((*path, "tolerance"), "only a 'within' conclusion takes a tolerance")
        if kind not in KINDS or figure is None:
            return None
        return Conclusion(self.text(m, path, "claim"), self.text(m, path, "study_figures"), kind, figure, a, b, tol)
