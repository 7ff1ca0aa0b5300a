"""The troubleshooting page collects every hint hvnet's code gives with an error: a hint written in the code
as a literal must be on the page, word for word, so the page cannot fall behind the code."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "troubleshooting.md"


def literal_hints() -> Iterator[tuple[str, str]]:
    """(where, hint) for every ``hint="..."`` keyword given a plain string in appliance/ and tui/."""
    for path in sorted([*(ROOT / "appliance").rglob("*.py"), *(ROOT / "tui").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "hint" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    yield f"{path.relative_to(ROOT)}:{node.lineno}", kw.value.value


def test_every_literal_hint_is_on_the_troubleshooting_page() -> None:
    page = PAGE.read_text().replace("\\|", "|")
    hints = list(literal_hints())
    assert len(hints) > 50  # the walk finds them: a broken walk cannot pass by finding none
    missing = [f"{where}: {hint}" for where, hint in hints if hint not in page]
    assert not missing, "hints not on docs/troubleshooting.md:\n" + "\n".join(missing)
