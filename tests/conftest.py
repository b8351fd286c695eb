"""What both tiers share (tests/README.md): no test leaves a process behind; the examples budget.

The end-to-end tier's fixtures (a private mm home, real daemons, scripted model servers) are in
tests/e2e/conftest.py.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

import psutil
import pytest

from . import budget
from .paths import TESTS


def pytest_configure(config: pytest.Config) -> None:
    """The unit tier run on its own is the quick run: generated tests run a tenth of their examples."""
    unit = TESTS / "unit"
    paths = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    alone = bool(paths) and all(path.is_relative_to(unit) for path in paths)
    budget.quick = alone and os.environ.get("MM_TEST_EXAMPLES") != "all"


@pytest.fixture(autouse=True)
def no_orphans() -> Iterator[None]:
    """Fail a test that leaves a child process of the test runner behind."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 5
    while True:
        left = [p for p in me.children(recursive=True) if p.pid not in before and _alive(p)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    assert not left, f"processes left behind: {[(p.pid, _cmd(p)) for p in left]}"


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return "?"
