"""The VM tests' lab fixtures, from ``tests/lab/conftest.py``, and the kernel-datapath VM host labs they share.

The modules marked ``shared_lab(GROUP)`` run group by group, in :data:`LAB_GROUPS` order (pytest would run them
file by file, and the mixed pair's lab would fall between two turns of the one on the VM host's guests); a test
marked ``ends_lab`` (it hangs or kills the VM) runs after every other test of its group.
"""

from collections.abc import Iterator

import pytest

from tests.lab.conftest import lab, switch  # noqa: F401
from tests.vm import vmlab

LAB_GROUPS = ("isolation", "mixed", "guests")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "shared_lab(group): runs with the other tests on the same VM-host lab")
    config.addinivalue_line("markers", "ends_lab: takes its VM-host lab down: runs after the rest of its group")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The shared-lab tests, in the places they held, reordered group by group (otherwise in collection order)."""
    at = [i for i, item in enumerate(items) if item.get_closest_marker("shared_lab")]

    def key(item: pytest.Item) -> tuple[int, bool]:
        group = item.get_closest_marker("shared_lab")
        assert group is not None
        return LAB_GROUPS.index(group.args[0]), item.get_closest_marker("ends_lab") is not None

    for i, item in zip(at, sorted((items[i] for i in at), key=key), strict=True):
        items[i] = item


@pytest.fixture(scope="session")
def vm_labs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[vmlab.Labs]:
    """The kernel-datapath VM host lab that is up, one at a time; the last one down at the session's end."""
    labs = vmlab.Labs(tmp_path_factory)
    try:
        yield labs
    finally:
        labs.close()
