"""The project's own promises about itself: a thin client, and CI running the README's test command."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_client_imports_no_daemon_internals():
    code = (
        "import sys, mm.cli\n"
        "heavy = ('trio', 'httpx', 'anyio', 'h11', 'psutil', 'yaml', 'sqlite3')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "             or (m.startswith('mmd.') and not m.startswith('mmd.rpc')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert block, "the README starts with a sh block"
    return [line for line in block[1].splitlines() if line.strip()]


def test_readme_starts_with_exactly_two_setup_commands():
    text = (ROOT / "README.md").read_text()
    assert text.index("```sh") < text.index("\n## "), "the commands come before any section"
    commands = readme_commands()
    assert len(commands) == 2
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    assert readme_commands()[1] in (ROOT / ".ci" / "run").read_text()
