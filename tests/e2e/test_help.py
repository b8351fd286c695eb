"""`mm --help` runs for every subcommand, as a user runs it.

That each option is explained and no summary is cut short is read from click in process:
tests/unit/mm/test_help.py.
"""

from __future__ import annotations

from mm.cli import main

from ..unit.mm.test_help import _commands
from .conftest import run_mm


def test_help_of_each_command_runs():
    for path, _ in _commands(main):
        result = run_mm(*path[1:], "--help")
        assert result.returncode == 0, result.stderr
        usage = result.stdout.splitlines()[0]
        assert usage.startswith("Usage: ") and " ".join(path[1:]) in usage, usage
