"""The VM tests' lab fixtures, from ``tests/lab/conftest.py``, and the kernel-datapath VM host labs they share.

The modules marked ``shared_lab(GROUP)`` run group by group, in :data:`LAB_GROUPS` order (pytest would run them
file by file, and the mixed pair's lab would fall between two turns of the one on the VM host's guests); a test
marked ``ends_lab`` (it hangs or kills the VM) runs after every other test of its group.

The tests that use the mixed lab with QEMU guests (the ``mixed`` fixture, :mod:`tests.vm.qemumixed`) run one after
the other, from the place of the first of them, and the lab goes down after the last one.
"""

from collections.abc import Iterator

import pytest

from appliance.lab import Lab
from tests.lab.conftest import lab, switch  # noqa: F401
from tests.vm import vmlab
from tests.vm.qemumixed import MixedLab

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
    mixed = [item for item in items if "mixed" in getattr(item, "fixturenames", ())]
    if mixed:
        first = items.index(mixed[0])
        rest = [item for item in items if item not in mixed]
        items[:] = rest[:first] + mixed + rest[first:]


_MIXED = pytest.StashKey[MixedLab]()


@pytest.fixture(scope="session")
def qemu_mixed_lab(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MixedLab]:
    holder = MixedLab(tmp_path_factory)
    request.config.stash[_MIXED] = holder
    try:
        yield holder
    finally:
        holder.close()


@pytest.fixture(scope="module")
def mixed(qemu_mixed_lab: MixedLab) -> Lab:
    """The mixed lab with QEMU guests, shared by the modules that use it (see the module's docstring)."""
    return qemu_mixed_lab.get()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test that uses the mixed lab, it goes down (its guests would load the rest of the run)."""
    holder = item.config.stash.get(_MIXED, None)
    last = nextitem is None or "mixed" not in getattr(nextitem, "fixturenames", ())
    if holder is not None and "mixed" in getattr(item, "fixturenames", ()) and last:
        holder.close()


@pytest.fixture(scope="session")
def vm_labs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[vmlab.Labs]:
    """The kernel-datapath VM host lab that is up, one at a time; the last one down at the session's end."""
    labs = vmlab.Labs(tmp_path_factory)
    try:
        yield labs
    finally:
        labs.close()
