"""Value rules shared by every file and argument hvnet accepts.

Each checker returns the normalised value or raises ``ValueError`` with a
message that says what is allowed; callers attach file, line and field
(a rule that reads several fields says which one was bad: :class:`FieldError`).
"""

from __future__ import annotations

import re
from typing import Any

# Linux IFNAMSIZ is 16 including the NUL; OVS port names that are kernel
# devices must satisfy the kernel.  '/', whitespace and ':' are refused by
# the kernel or by OVS tools; a leading '-' would read as an option.
_IFNAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,14}$")
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
# What no name given to hvnet may hold: C0 (tab and newline included), DEL, C1, the line and paragraph
# separators, bidi marks, embeddings, overrides and isolates, lone surrogates (render.terminal's set).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
TEXT_ALLOWS = "\n\t"  # what longer text (a description, a filter) may hold besides


class FieldError(ValueError):
    """A bad value of one field; ``field`` names it (``rate``, ``output.port``) for the caller's message."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def int_or_text(text: str) -> int | str:
    """An integer if ``text`` is one, else the text (so the rule's own validator words the refusal)."""
    try:
        return int(text)
    except ValueError:
        return text


def no_control(value: str, allow: str = "") -> str:
    """``value`` when it holds no control character (but those in ``allow``); else a ValueError naming it.

    Such a name would steer the terminal it is shown on, or select nothing an
    operator can type; a real port named so is selected by its MAC or VM.
    """
    for i, c in enumerate(value):
        if c not in allow and _CONTROL.match(c):
            raise ValueError(
                f"holds the control character U+{ord(c):04X} at position {i + 1}: names given to hvnet may not "
                "(select a port named so by its MAC or VM)"
            )
    return value


def ifname(value: Any) -> str:
    """A kernel/OVS interface name."""
    if not isinstance(value, str) or not _IFNAME.match(value) or value in (".", ".."):
        raise ValueError(
            f"invalid interface name {value!r}: 1-15 characters from letters, digits, '_', '.', '-', "
            "not starting with '.' or '-'"
        )
    return value


def mac(value: Any) -> str:
    """A unicast Ethernet address, normalised to lower case."""
    if not isinstance(value, str) or not _MAC.match(value):
        raise ValueError(f"invalid MAC address {value!r}; write six hex pairs like 02:00:00:00:00:01 (quoted)")
    first = int(value[:2], 16)
    if first & 1:
        raise ValueError(f"MAC {value} is a multicast address; a VIF needs a unicast one (even first octet)")
    if value.replace(":", "") == "000000000000":
        raise ValueError("MAC 00:00:00:00:00:00 is not a usable address")
    return value.lower()


_XAPI_URL = re.compile(r"^https?://[^\s/?#]{1,253}(?:/[^\s]{0,200})?$")


def xapi_url(value: Any) -> str:
    """A pool master's XAPI URL, never with credentials in it: xmlrpc would send ``user:pass@`` as a Basic
    header as well, and a URL is printed in log lines and process listings where a password must not be."""
    if not isinstance(value, str) or not _XAPI_URL.match(value):
        raise ValueError("an http:// or https:// URL of the pool master (https://192.0.2.10)")
    if "@" in value.split("/", 3)[2]:
        raise ValueError("a URL without USER:PASSWORD@ (the user and password go in the credentials file)")
    return value


def redact_url(value: str) -> str:
    """``scheme://user:pass@host/...`` shown as ``scheme://***@host/...`` (anything else unchanged)."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@", r"\1***@", value)


_FINGERPRINT = re.compile(r"^(?:sha256:)?((?:[0-9A-Fa-f]{2}:){31}[0-9A-Fa-f]{2}|[0-9A-Fa-f]{64})$", re.I)


def sha256_fingerprint(value: Any) -> str:
    """A certificate's SHA-256 fingerprint as ``openssl x509 -noout -fingerprint -sha256`` prints it
    (``AB:CD:...``, 32 pairs) or as 64 hex digits; normalised to 64 lowercase hex digits."""
    m = _FINGERPRINT.match(value) if isinstance(value, str) else None
    if m is None:
        raise ValueError("a SHA-256 fingerprint: 32 hex pairs separated by ':' (as "
                         "'openssl x509 -noout -fingerprint -sha256' prints it) or 64 hex digits")  # fmt: skip
    return m.group(1).replace(":", "").lower()
