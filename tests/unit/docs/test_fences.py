"""The docs checks themselves: what they take for a command line and an example, and that they fail."""

from __future__ import annotations

from pathlib import Path

from tests.unit.docs.fences import Fence, commands, fences
from tests.unit.docs.test_examples import parse_error, validate_example

PAGE = """\
Intro.

```console
$ hvnet status --json | jq .
bridge  xenbr0
# hvnet --host hv1 apply policy.yaml \\
    --no-commit --timeout 60
```

```sh
HVNET_DB=unix:/tmp/db.sock sudo -E hvnet verify FILE 2>/dev/null   # drift
.venv/bin/hvnet tap list [--json]
hvnet mirror add span1 ... --may-exist
ovs-vsctl show
hvnet statsu
hvnet --db 'unix:/tmp/x status
hvnet --db ssl:[fe80::1]:6640 status [--json]
```

<!-- example: policy -->
```yaml
version: 1
vifs: [{vm: VM1, vlan: {mode: access, tag: 1}}]
```

```yaml
unmarked: true
```
"""


def test_command_lines_are_found_with_their_lines_and_arguments() -> None:
    found = [(c.line, c.argv) for f in fences(PAGE) for c in commands(f)]
    assert found == [
        (4, ["status", "--json"]),  # the pipe is the shell's; "bridge xenbr0" is output
        (6, ["--host", "hv1", "apply", "policy.yaml", "--no-commit", "--timeout", "60"]),  # continued
        (11, ["verify", "FILE"]),  # assignments, sudo and its flags, the redirection's 2 dropped
        (12, ["tap", "list", "--json"]),  # synopsis brackets read as the fullest form
        (15, ["statsu"]),  # the sketch with '...' and ovs-vsctl are not hvnet command lines
        (16, []),  # unbalanced quotes: a problem of its own
        (17, ["--db", "ssl:[fe80::1]:6640", "status", "--json"]),  # an address's brackets are kept
    ]
    bad = [c for f in fences(PAGE) for c in commands(f) if c.problem]
    assert [c.line for c in bad] == [16] and "No closing quotation" in bad[0].problem


def test_a_misspelt_verb_or_option_is_refused_and_a_good_line_is_not() -> None:
    assert "invalid choice: 'statsu'" in (parse_error(["statsu"]) or "")
    assert "unrecognized arguments: --jsn" in (parse_error(["status", "--jsn"]) or "")
    assert parse_error(["--host", "hv1", "apply", "policy.yaml", "--no-commit", "--timeout", "60"]) is None
    assert parse_error(["apply", "--help"]) is None  # help exits 0


def test_markers_are_read_from_the_line_before_the_fence() -> None:
    marked = [(f.line, f.lang, f.marker) for f in fences(PAGE) if f.lang == "yaml"]
    assert marked == [(21, "yaml", "policy"), (26, "yaml", None)]


def test_an_example_that_does_not_validate_names_its_problem(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    good = Fence(1, "yaml", "policy", "version: 1\nvifs: [{vm: VM1, vlan: {mode: access, tag: 1}}]\n")
    assert validate_example(good, tmp_path) is None
    bad = Fence(1, "yaml", "policy", "version: 1\nvifs: [{vm: VM1, vlan: {mode: acces, tag: 1}}]\n")
    assert "vlan.mode" in (validate_example(bad, tmp_path) or "")
    assert "unknown example kind" in (validate_example(Fence(1, "yaml", "polcy", "x: 1\n"), tmp_path) or "")
