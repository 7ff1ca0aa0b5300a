"""The VM tests' lab fixtures, from ``tests/lab/conftest.py``."""

from tests.lab.conftest import lab, switch  # noqa: F401
