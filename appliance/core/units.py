"""Rates and burst sizes with their units: one grammar for every flag and policy field that takes one.

hvnet's own unit is OVS's: kbit/s for a rate, kbit for a burst (``ingress_policing_rate``, a QoS's
``max-rate`` / 1000), and a bare number keeps meaning that.  Everything else names its unit, because the
tools an operator comes from disagree on the short spellings: ``tc`` reads ``kbps`` as kilobytes/s,
OVS's meters and OpenStack's ``max_kbps`` as kilobits/s, and XenServer's ``qos_algorithm_params:kbps`` is
documented as kilobytes/s -- a factor of 8 either way, so ``kbps`` (and ``mbps``, ``kb``, ...) is refused
with both readings named rather than guessed.

Grammar (spaces allowed before the unit; ``/s`` optional on a rate, refused on a size):

- bits, 1000-based, any case: ``bit``, ``kbit``, ``mbit``, ``gbit`` (and ``k``, ``m``, ``g`` alone, as
  policy files have always taken them); 1024-based: ``kibit``, ``mibit``, ``gibit``;
- bytes, an upper-case ``B``: ``B``, ``KB`` (or ``kB``), ``MB``, ``GB`` 1000-based, ``KiB``, ``MiB``,
  ``GiB`` 1024-based.

A value that is not a whole kbit (``1220KiB/s`` is 9994.24 kbit/s) is rounded to the nearest kbit, and
:func:`rounding_note` says so; a bare number is already kbit and must be whole.

Files are stricter (``in_file=True``: policy and probe files).  hvnet once read any ``b`` in a file's
unit as bits, so ``10MB`` in a file written then meant 10 Mbit/s; read now as bytes it would raise the
limit 8-fold without a word.  A file therefore takes the 1000-based byte units (``B``, ``KB``, ``MB``,
``GB``) as an error naming both readings, and the 1024-based ones (``KiB``, ``MiB``), which no older
hvnet took, as bytes.  A file's value must also come to a whole kbit: what is applied from a file is
exactly what it says, never a rounded neighbour nobody sees.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

MAX_KBIT = 2**31  # OVS keeps the rate in a 32-bit field; larger is a typo, not a link speed
_MAX_TEXT = 40  # no unit spelling is longer; longer text is refused before the pattern reads it

_BITS = {"bit": 1, "k": 1000, "kbit": 1000, "m": 10**6, "mbit": 10**6, "g": 10**9, "gbit": 10**9,
         "kibit": 1024, "mibit": 1024**2, "gibit": 1024**3}  # fmt: skip
_BYTES = {"B": 8, "KB": 8000, "MB": 8 * 10**6, "GB": 8 * 10**9, "KIB": 8 * 1024, "MIB": 8 * 1024**2,
          "GIB": 8 * 1024**3}  # fmt: skip
_DECIMAL_BYTES = {"B", "KB", "MB", "GB"}  # what a file written for an older hvnet may hold, meaning bits
_VALUE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*(/\s*[sS])?\s*$")
_PREFIXES = {"": "", "k": "kilo", "m": "mega", "g": "giga", "t": "tera", "ki": "kibi", "mi": "mebi",
             "gi": "gibi", "ti": "tebi"}  # fmt: skip

RATE_UNITS = "kbit/s (bare number), bit/s, kbit/s, mbit/s, gbit/s, KB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s"
SIZE_UNITS = "kbit (bare number), bit, kbit, mbit, gbit, B, KB, MB, GB, KiB, MiB, GiB"


class UnitError(ValueError):
    """A rate or size hvnet cannot take; the message says what is allowed."""


def parse_rate(value: Any, what: str = "rate", *, in_file: bool = False) -> int:
    """``value`` (a number of kbit/s, or text with a unit) as a whole number of kbit/s, rounded to the nearest
    (``in_file``: a file's value, see the module's docstring)."""
    return _nearest(exact_kbit(value, what, rate=True, in_file=in_file), what, value, in_file)


def parse_size(value: Any, what: str = "burst", *, in_file: bool = False) -> int:
    """``value`` (a number of kbit, or text with a unit) as a whole number of kbit, rounded to the nearest."""
    return _nearest(exact_kbit(value, what, rate=False, in_file=in_file), what, value, in_file)


def _nearest(exact: Fraction, what: str, given: Any, in_file: bool = False) -> int:
    """``exact`` to the nearest whole kbit; something that rounds to nothing is refused, not taken as 0."""
    whole = _whole(exact)
    if in_file and exact.denominator != 1:
        raise UnitError(f"{what} {given!r} is {float(exact):.6g} kbit; a file's value must come to a whole kbit "
                        f"(OVS takes no fraction): write {whole} (kbit) or another unit")  # fmt: skip
    if exact and not whole:
        raise UnitError(f"{what} {given!r} rounds to 0: OVS takes a whole number of kbit, 1 at least")
    return whole


def rounding_note(value: Any, what: str, *, rate: bool = True) -> str | None:
    """What rounding ``value`` to a whole kbit changed, for the operator to see; None when nothing was."""
    exact = exact_kbit(value, what, rate=rate)
    if exact.denominator == 1:
        return None
    unit = "kbit/s" if rate else "kbit"
    return f"{what} {value} is {float(exact):.6g} {unit}; OVS takes whole kbit: {_whole(exact)} {unit}"


def exact_kbit(value: Any, what: str, *, rate: bool, in_file: bool = False) -> Fraction:
    """``value`` in kbit(/s), exactly; :class:`UnitError` naming ``what`` and the units allowed."""
    allowed = RATE_UNITS if rate else SIZE_UNITS
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnitError(
            f"{what} must be a number of kbit{'/s' if rate else ''} or text with a unit ({allowed}), "
            f"not {type(value).__name__}"
        )
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise UnitError(f"{what} must be a finite number, not {value}")
        return _bare(Fraction(value), what, value)
    text = value
    if len(text) > _MAX_TEXT:
        raise UnitError(f"{what} is {len(text)} characters long; write a number with a unit ({allowed})")
    m = _VALUE.match(text)
    if not m:
        raise UnitError(_not_a(what, text, allowed))
    number, unit, per_s = m.group(1), m.group(2), m.group(3)
    if not unit:
        if per_s:
            raise UnitError(f"{what} {text!r} names no unit before '/s'; allowed: {allowed}")
        return _bare(Fraction(number), what, text)
    if per_s and not rate:
        raise UnitError(f"{what} {text!r} is a rate; a burst is a size ({allowed})")
    if in_file and unit.endswith("B") and unit[:-1].upper() + "B" in _DECIMAL_BYTES:
        raise UnitError(_old_bits_in_a_file(what, text, unit))
    return _checked(Fraction(number) * _factor(unit, text, what, allowed) / 1000, what, text)


def _factor(unit: str, text: str, what: str, allowed: str) -> int:
    prefix = _ambiguous_prefix(unit)
    if prefix is not None:
        word = _PREFIXES[prefix.lower()]
        bits, octets = prefix.lower() + "bit", prefix[:1].upper() + prefix[1:].lower() + "B"
        raise UnitError(
            f"{what} {text!r} is ambiguous: '{unit}' is {word}bytes/s to tc and to XenServer (xe's "
            f"qos_algorithm_params:kbps) but {word}bits/s to OVS, OpenStack and most data sheets -- "
            f"a factor of 8; write '{bits}' for bits or '{octets}' for bytes (allowed: {allowed})"
        )
    if unit.lower() in _BITS:
        return _BITS[unit.lower()]
    if unit.endswith("B") and unit[:-1].upper() + "B" in _BYTES:
        return _BYTES[unit[:-1].upper() + "B"]
    raise UnitError(_not_a(what, text, allowed) + f" -- {unit!r} is no unit hvnet knows")


def _old_bits_in_a_file(what: str, text: str, unit: str) -> str:
    """Why a file's ``KB``/``MB``/``GB``/``B`` is refused, and what to write instead."""
    prefix = unit[:-1]
    if not prefix:  # 'B' alone: an older hvnet read '10B' as 10 kbit
        return (f"{what} {text!r}: in a file, 'B' is refused: hvnet once read '10B' as 10 kbit, and as bytes it "
                "would be 125 times less; write the number alone for kbit, or 'KiB' for 1024-based bytes")  # fmt: skip
    word = _PREFIXES[prefix.lower()]
    return (f"{what} {text!r}: in a file, '{unit}' is refused: hvnet once read it as {word}bits, and as bytes "
            f"it would be 8 times that; write '{prefix.lower()}bit' for bits, or '{prefix.upper()}iB' for "
            "1024-based bytes")  # fmt: skip


def _not_a(what: str, text: str, allowed: str) -> str:
    return f"{what} {text!r} is not a rate/size; write kbit as a number (10240) or with a unit ('10mbit'; {allowed})"


def _ambiguous_prefix(unit: str) -> str | None:
    """The prefix of a unit that does not say bits or bytes (``kbps``, ``Mbps``, ``kb``, ``b``), else None.

    A ``b`` alone is read both ways; only an upper-case ``B`` (``KB``, ``MiB``) says bytes.
    """
    if unit.lower().endswith("bps") and unit[:-3].lower() in _PREFIXES:
        return unit[:-3]
    if unit.endswith("b") and unit[:-1].lower() in _PREFIXES:
        return unit[:-1]
    return None


def _bare(exact: Fraction, what: str, given: Any) -> Fraction:
    """A bare number: already kbit(/s), so it must be whole (a fraction of the base unit is a typo)."""
    if exact.denominator != 1:
        raise UnitError(f"{what} must be a whole number of kbit ({given!r}); a unit says more ('1.5mbit')")
    return _checked(exact, what, given)


def _checked(kbit: Fraction, what: str, given: Any) -> Fraction:
    if kbit < 0:
        raise UnitError(f"{what} must not be negative ({given!r})")
    if kbit > MAX_KBIT:
        raise UnitError(f"{what} {given!r} is larger than OVS accepts ({MAX_KBIT} kbit)")
    return kbit


def _whole(kbit: Fraction) -> int:
    """The nearest whole kbit, halves up (``round`` would take 0.5 to 0 and 2.5 to 2)."""
    return math.floor(kbit + Fraction(1, 2))


# -- the same limit in the units other tools speak (``hvnet vif show``) -------------------------------


def xe_kbps(rate_kbit: int) -> float:
    """A rate in XenServer's ``qos_algorithm_params:kbps``: kilobytes/s, as its manual documents it."""
    return rate_kbit / 8


def libvirt_average(rate_kbit: int) -> float:
    """A rate in libvirt's ``<bandwidth>`` ``average``/``peak``: kilobytes/s (libvirt: 8000 bits each)."""
    return rate_kbit / 8


def libvirt_burst(burst_kbit: float) -> float:
    """A size in libvirt's ``<bandwidth>`` ``burst``: kibibytes (libvirt: 8192 bits each)."""
    return burst_kbit * 1000 / 8192
