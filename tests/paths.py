"""Where things are, for tests at any depth: the repository, the tests folder, the shared fixtures."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# Model outputs and other data files shared by both tiers (tests/README.md).
FIXTURES = TESTS / "fixtures"
