"""Hostile agent files and configs: alias bombs, deep nesting, huge files (issue 13, item 2).

A cloned repository's ``./mm.yaml`` is read by the daemon for every prompt. A 353-byte alias
bomb used to grow mmd to 24 GB until the kernel killed it; a 5,000-deep file raised a bare
RecursionError; a 12.8 MB file of 100k tools stalled the daemon for 90 s. The loader now reads at
most 1 MiB, composes YAML within a depth and a value budget (aliases counted for what they
repeat), caps the declared tools, and the daemon parses in a worker thread. Each refusal names
the file and the line. The daemon of these tests runs under a 2 GiB address-space limit, so a
regression ends in MemoryError or death, not in a swapping machine. The loader's limits, generated,
are in tests/unit/config/test_agent_files.py.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd.config.declared import MAX_TOOLS
from mmd.config.loader import MAX_FILE_BYTES
from mmd.tools.skills import MAX_FRONT_MATTER
from mmd.untrusted import MAX_YAML_DEPTH, MAX_YAML_VALUES

from ..conftest import run_mm, socket_of, spawn_mm, stop_daemon, trust_here, wait_for_socket, write_config
from .serves import assert_daemon_serves

# The address space the daemon under test may use: far above what it needs, far below a bomb's.
MEMORY_LIMIT = 2 * 1024**3
# The alias bomb: nine levels of nine aliases, 10^9 strings once expanded.
BOMB = (
    "a: &a ["
    + ",".join(['"lol"'] * 9)
    + "]\n"
    + "".join(
        f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.fixture
def limited(mm_home: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real mmd on the test's socket whose address space is capped at MEMORY_LIMIT."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmd", "--socket", str(socket_of(mm_home))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_limit_memory,
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},  # thread arenas reserve 64 MiB of address space each
    )
    wait_for_socket(socket_of(mm_home), proc)
    yield proc
    stop_daemon(proc)


def refused(work: Path, *args: str) -> str:
    """Run ``mm -p`` in *work* (its ./mm.yaml), expect a config error, return its message."""
    result = run_mm(*args, "-p", "go", cwd=work, timeout=120)
    assert result.returncode == 1, (result.stdout, result.stderr)
    return result.stderr


def probe_agent(home: Path) -> Path:
    """A second project whose turns need no server: an in-daemon scripted model, trusted (a project's
    ``scripted:`` model waits for trust: docs/security.md#project-trust)."""
    other = home / "other"
    other.mkdir()
    (other / "script.json").write_text(json.dumps({"responses": [{"text": "other turn done"}]}))
    (other / "mm.yaml").write_text("model: scripted:script.json\n")
    trust_here(other)
    return other


# --- the cases, on a real daemon under a memory limit ------------------------------------


def test_the_alias_bomb_is_refused_with_its_line(mm_home, limited):
    work = mm_home / "work"
    (work / "mm.yaml").write_text(BOMB)
    assert len(BOMB.encode()) < 353
    message = refused(work)
    # The first alias that passes the budget is the third *d on line 5 (e:).
    assert (
        f"{work / 'mm.yaml'}:5: more than {MAX_YAML_VALUES:,} values in the file (the alias *d here"
        in message
    )
    assert "write the file out with fewer values and fewer aliases" in message
    assert limited.poll() is None
    assert_daemon_serves(mm_home)


@pytest.mark.parametrize(
    "deep",
    [
        pytest.param("tools: " + "[" * 5000 + "]" * 5000, id="flow lists"),
        pytest.param("tools: " + "{a: " * 5000 + "x" + "}" * 5000, id="flow maps"),
        pytest.param("tools:\n" + "- " * 5000 + "x", id="block lists"),
    ],
)
def test_a_5000_deep_file_is_refused_with_its_line(mm_home, limited, deep):
    work = mm_home / "work"
    (work / "mm.yaml").write_text("model: scripted:x.json\nsystem: hi\n" + deep + "\n")
    message = refused(work)
    line = 3 if deep.startswith("tools: ") else 4
    assert (
        f"{work / 'mm.yaml'}:{line}: maps and lists nested more than {MAX_YAML_DEPTH} levels deep; "
        f"the limit is {MAX_YAML_DEPTH} — flatten the structure"
    ) in message
    assert "RecursionError" not in message
    assert_daemon_serves(mm_home)


def huge_agent_file(path: Path, tools: int) -> bytes:
    """The issue's 12.8 MB agent file: *tools* declared tools of about 128 bytes each."""
    entry = (
        "  - name: tool{0}\n    description: Tool number {0} of many.\n    command: [./run, '{{{{x}}}}']\n"
    )
    entry += "    parameters: {{x: {{type: string}}}}\n"
    raw = ("tools:\n" + "".join(entry.format(i) for i in range(tools))).encode()
    path.write_bytes(raw)
    return raw


def test_a_huge_agent_file_is_refused_while_another_clients_turn_completes(mm_home, limited):
    work = mm_home / "work"
    raw = huge_agent_file(work / "mm.yaml", 100_000)
    assert len(raw) > 12_000_000
    # Under the byte cap but past the value cap: the parse that takes longest before its refusal.
    slow = mm_home / "slow"
    slow.mkdir()
    (slow / "mm.yaml").write_text("tools: [" + ", ".join(["1"] * (MAX_YAML_VALUES + 10)) + "]\n")
    other = probe_agent(mm_home)
    huge_client = spawn_mm("-p", "go", cwd=work)
    slow_client = spawn_mm("-p", "go", cwd=slow)
    try:
        other_turn = run_mm("-p", "hello", cwd=other, timeout=120)  # meanwhile, in another project
        status = run_mm("daemon", "status", cwd=other)
        _, huge_err = huge_client.communicate(timeout=120)
        _, slow_err = slow_client.communicate(timeout=120)
    finally:
        for client in (huge_client, slow_client):
            if client.poll() is None:
                client.kill()
                client.communicate()
    assert other_turn.returncode == 0, other_turn.stderr
    assert other_turn.stdout == "other turn done\n"
    assert status.returncode == 0, status.stderr
    line = raw[:MAX_FILE_BYTES].count(b"\n") + 1
    assert huge_client.returncode == 1
    assert (
        f"{work / 'mm.yaml'}:{line}: the file is {len(raw):,} bytes; the limit is {MAX_FILE_BYTES:,} bytes "
        "(1 MiB) for a file written by hand — keep long texts"
    ) in huge_err
    assert slow_client.returncode == 1
    assert f"{slow / 'mm.yaml'}:1: more than {MAX_YAML_VALUES:,} values in the file; the limit is" in slow_err
    assert limited.poll() is None
    assert_daemon_serves(mm_home)


def test_too_many_tools_are_refused_at_the_first_one_past_the_cap(mm_home, limited):
    work = mm_home / "work"
    huge_agent_file(work / "mm.yaml", MAX_TOOLS + 44)
    message = refused(work)
    line = 1 + 4 * MAX_TOOLS + 1  # "tools:", then four lines per tool
    assert (
        f"{work / 'mm.yaml'}:{line}: tools[{MAX_TOOLS}]: {MAX_TOOLS + 44:,} tools declared; "
        f"the limit is {MAX_TOOLS} — keep the tools this agent needs"
    ) in message
    checked = run_mm("tools", "check", "mm.yaml", cwd=work)  # the tools.check method, same refusal
    assert checked.returncode == 1 and f"tools[{MAX_TOOLS}]: " in checked.stderr
    assert_daemon_serves(mm_home)


def test_every_reader_of_the_agent_file_refuses_the_bomb(mm_home, limited):
    work = mm_home / "work"
    (work / "mm.yaml").write_text(BOMB)
    for command in (["tools", "list"], ["tools", "check", "mm.yaml"], ["mcp", "list"]):
        result = run_mm(*command, cwd=work, timeout=120)
        assert result.returncode == 1, command
        assert f"{work / 'mm.yaml'}:5: more than {MAX_YAML_VALUES:,} values" in result.stderr, command
    assert_daemon_serves(mm_home)


def test_a_bomb_in_config_yaml_is_refused_with_its_line(mm_home, limited):
    config = write_config(mm_home, {})
    config.write_text("daemon: {max_steps: 5}\n" + BOMB)
    message = refused(mm_home / "work")
    assert f"{config}:6: more than {MAX_YAML_VALUES:,} values" in message
    config.write_text("")
    assert_daemon_serves(mm_home)


def test_a_bomb_or_deep_front_matter_skips_that_skill_only(mm_home, limited):
    work = probe_agent(mm_home)
    bombs = {
        "bomb": "---\nname: bomb\ndescription: x\n" + BOMB + "---\nbody\n",
        "deep": "---\nname: deep\ndescription: " + "[" * 5000 + "]" * 5000 + "\n---\nbody\n",
        "big": "---\nname: big\ndescription: " + "x" * 70_000 + "\n---\nbody\n",
        "fine": "---\nname: fine\ndescription: A fine skill.\n---\nbody\n",
    }
    for name, text in bombs.items():
        (work / ".mm" / "skills" / name).mkdir(parents=True)
        (work / ".mm" / "skills" / name / "SKILL.md").write_text(text)
    result = run_mm("-p", "hello", cwd=work, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "other turn done\n"
    listed = run_mm("tools", "list", cwd=work)
    assert listed.returncode == 0, listed.stderr
    assert "read_skill" in listed.stdout  # the fine skill is there
    warnings = listed.stderr
    assert warnings.count("warning: ") == 3, warnings
    # Lines of SKILL.md: the bomb's fifth line is the file's eighth (after ---, name, description).
    assert f"bad YAML in the front matter at line 8: more than {MAX_YAML_VALUES:,} values" in warnings
    assert (
        f"bad YAML in the front matter at line 3: maps and lists nested more than {MAX_YAML_DEPTH}"
        in warnings
    )
    size = len(bombs["big"].split("---\n")[1])
    assert f"the front matter is {size:,} characters; the limit is {MAX_FRONT_MATTER:,}" in warnings
    assert_daemon_serves(mm_home)


def test_a_scripted_model_from_a_bomb_script_is_refused(mm_home, limited):
    work = mm_home / "work"
    (work / "bomb.yaml").write_text(BOMB)
    (work / "mm.yaml").write_text("model: scripted:bomb.yaml\n")
    result = run_mm("--agent", "mm.yaml", "-p", "go", cwd=work, timeout=120)  # named: trusted as it is
    assert result.returncode == 1
    assert f"more than {MAX_YAML_VALUES:,} values" in result.stderr
    assert limited.poll() is None
    assert_daemon_serves(mm_home)


# --- the loader, generated ------------------------------------------------------------------------
