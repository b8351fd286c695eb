"""How many examples a generated (hypothesis) test runs: all it names in the whole suite, a tenth in the quick run.

Each generated test names the examples it runs, chosen for the whole suite (``python -m
pytest``, what CI runs). Run on its own (``pytest tests/unit``, the quick command, or any
path under it), the unit tier runs a tenth of each, at least 20, so that it stays within
90 s on two cores: at full counts its generated tests alone take about 80 s of CPU.
``MM_TEST_EXAMPLES=all`` runs the full counts in any run, e.g. to replay one CI found.

tests/conftest.py decides which (``pytest_configure``), before any test module is imported.
"""

from __future__ import annotations

# Set by tests/conftest.py: whether this run is the unit tier on its own.
quick = False


def examples(n: int) -> int:
    """The examples to run of a test that names *n*."""
    return max(n // 10, min(n, 20)) if quick else n
