"""The unit tier's rule, checked when tests are collected: nothing here is slow or needs Neovim or the real model.

Such tests belong in tests/e2e (tests/README.md). The end-to-end fixtures (``mm_home``,
``daemon``, ``scripted``) are defined in tests/e2e/conftest.py, so a unit test cannot ask for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent
E2E_MARKERS = {"slow", "nvim", "local_model"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wrong = [
        item.nodeid
        for item in items
        if item.path.is_relative_to(UNIT) and E2E_MARKERS & {mark.name for mark in item.iter_markers()}
    ]
    if wrong:
        raise pytest.UsageError(
            "tests marked slow, nvim or local_model belong in tests/e2e, not the unit tier:\n  "
            + "\n  ".join(wrong)
        )
