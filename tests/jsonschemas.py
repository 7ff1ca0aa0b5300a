"""The published JSON Schemas (``appliance/schemas``), checked as a consumer would check them:
draft 2020-12, with format checks.  Shared by the unit tests (real outputs built from captured inputs)
and the lab tests (real outputs of a running switch)."""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker

from appliance.core.documents import Document


def validator(doc: Document) -> Draft202012Validator:
    return Draft202012Validator(json.loads(doc.schema_path.read_text()), format_checker=FormatChecker())


def problems(doc: Document, instance: Any) -> list[str]:
    """Each way ``instance`` breaks ``doc``'s schema, as ``path: message`` (empty: it is one)."""
    found = validator(doc).iter_errors(instance)
    return sorted(f"/{'/'.join(str(p) for p in e.absolute_path)}: {e.message}" for e in found)


def check(doc: Document, instance: Any) -> None:
    found = problems(doc, instance)
    assert not found, f"not a valid {doc.name} version {doc.version}:\n" + "\n".join(found)
