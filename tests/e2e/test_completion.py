"""Shell completion: `mm completion SHELL` prints click's script, and the script completes in a real shell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import run_mm

# The installed `mm` script: completion scripts call the command by its name.
MM_BIN = Path(sys.executable).parent / "mm"
needs_mm_bin = pytest.mark.skipif(not MM_BIN.exists(), reason="the mm console script is not installed")


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F _mm_completion mm"),
        ("zsh", "#compdef mm"),
        ("fish", "complete --no-files"),
    ],
)
def test_completion_prints_the_script_for_each_shell(shell, marker):
    result = run_mm("completion", shell)
    assert result.returncode == 0, result.stderr
    assert "_MM_COMPLETE" in result.stdout and marker in result.stdout
    assert result.stderr == ""


def test_completion_of_an_unknown_shell_is_a_usage_error():
    result = run_mm("completion", "tcsh")
    assert result.returncode == 2 and "tcsh" in result.stderr


def _complete(words: str, cword: int) -> list[str]:
    """Ask the installed mm for completions as bash's script does."""
    env = {**os.environ, "_MM_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    out = subprocess.run(
        [str(MM_BIN)], env=env, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return [line.split(",", 1)[1] for line in out.splitlines() if line]


@needs_mm_bin
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands_and_options_through_the_script():
    script = run_mm("completion", "bash").stdout
    probe = (
        script
        + "\nCOMP_WORDS=(mm daemon ins); COMP_CWORD=2; COMPREPLY=(); _mm_completion mm; printf '%s\\n' \"${COMPREPLY[@]}\""
        + "\nCOMP_WORDS=(mm --output-format ''); COMP_CWORD=2; COMPREPLY=(); _mm_completion mm; printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    env = {**os.environ, "PATH": f"{MM_BIN.parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["install-service", "text", "json", "stream-json", "events"]


@needs_mm_bin
def test_session_ids_complete_from_the_running_daemon(mm_home, scripted, daemon):
    scripted([{"text": "done"}])
    first = json.loads(run_mm("--output-format", "json", "-p", "hi", cwd=mm_home / "work").stdout)
    session_id = first["session_id"]
    assert _complete("mm sessions show ", 3) == [session_id]
    assert _complete(f"mm --resume {session_id[:4]}", 2) == [session_id]
    assert _complete("mm --resume zz", 2) == []


@needs_mm_bin
def test_completion_without_a_daemon_offers_nothing_and_starts_none(mm_home):
    assert _complete("mm sessions show ", 3) == []
    assert not (mm_home / "run" / "mm" / "mmd.sock").exists()
