"""The console's tests run against the real lab: its fixtures, from ``tests/lab/conftest.py``."""

from tests.lab.conftest import lab, switch  # noqa: F401
