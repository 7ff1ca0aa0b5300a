"""OVN match expressions built from values, never by pasting text: strings quoted, addresses checked.

A logical port's name is whatever the cloud or the operator gave it, so it
may hold ``"``, ``\\`` or control characters.  Pasted between double quotes,
``p1" || ip4 || outport == "p2`` turns a rule for one port into one for all
IPv4 on the switch, and a trailing ``\\`` leaves the string unterminated, so
ovn-controller drops the rule.  OVN's lexer (``lex_parse_string``) reads a
string up to an unescaped ``"`` and unescapes it as a JSON string, so a name
written as a JSON string literal reads back as exactly that name.

MACs and IP addresses have no quoting in OVN's syntax: they are checked to
be exactly one address before they reach an expression.
"""

from __future__ import annotations

import ipaddress
import json
import re

_MAC = re.compile(r"[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5}")
PORT_FIELDS = ("inport", "outport")


def string(value: str) -> str:
    """``value`` as an OVN string literal: double-quoted, with ``"``, ``\\`` and control characters escaped."""
    if not isinstance(value, str):
        raise TypeError(f"an OVN string is text, not {type(value).__name__}")
    return json.dumps(value, ensure_ascii=False)


def port_is(field_name: str, port: str) -> str:
    """``inport == "PORT"`` (or ``outport``): the one logical port named ``port``."""
    if field_name not in PORT_FIELDS:
        raise ValueError(f"not a logical port field: {field_name!r}; allowed: {', '.join(PORT_FIELDS)}")
    return f"{field_name} == {string(port)}"


def mac(value: str) -> str:
    """One Ethernet address (six hex pairs), lower case; ValueError for anything else."""
    if not isinstance(value, str) or not _MAC.fullmatch(value):
        raise ValueError(f"not an Ethernet address: {value!r} (six hex pairs like 02:00:00:00:00:01)")
    return value.lower()


def ipv4(value: str) -> str:
    """One IPv4 address in dotted-quad form; ValueError for anything else (a prefix, a name, text after it)."""
    try:
        return str(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError) as exc:
        raise ValueError(f"not an IPv4 address: {value!r}") from exc
