"""Skills through a real mmd and the real mm CLI: where they are found, `mm skills list`, a missing
configured folder, and allowed-tools enforced on a turn with the scripted model server.

HOME is a folder of the test's own (the mm_home fixture's), so ~/.claude/skills is the test's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from .conftest import run_mm


def write_skill(folder: Path, name: str, description: str, extra: str = "", body: str = "Body.\n") -> Path:
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n{extra}---\n{body}")
    return folder


def stream(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def home(mm_home: Path) -> Path:
    """The test's HOME, set by mm_home (the daemon the CLI starts inherits it)."""
    assert os.environ["HOME"] == str(mm_home / "home")
    return mm_home / "home"


@pytest.fixture
def repo(mm_home: Path) -> Path:
    """A repository (a folder with .git) with the working directory two levels inside it."""
    root = mm_home / "work" / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "pkg" / "app").mkdir(parents=True)
    return root


def test_skills_list_shows_every_folder_s_skills_in_priority_order(
    mm_home: Path, home: Path, repo: Path
) -> None:
    cwd = repo / "pkg" / "app"
    write_skill(home / ".claude" / "skills" / "review", "review", "The user's review checklist.")
    write_skill(mm_home / "config" / "mm" / "skills" / "commit", "commit", "Write a commit message.")
    write_skill(repo / ".claude" / "skills" / "review", "review", "The repository's review (shadowed).")
    write_skill(
        repo / ".claude" / "skills" / "release",
        "release",
        "Publish a release.",
        "allowed-tools: Read, Bash(git:*)\n",
        body="x" * 400,
    )
    write_skill(cwd / ".agents" / "skills" / "lint", "lint", "Lint this package.")
    write_skill(repo / "pkg" / ".mm" / "skills" / "build", "build", "Build the package.")

    result = run_mm("skills", "list", cwd=cwd)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "FROM", "TOKENS", "DESCRIPTION"]
    assert [line.split()[:2] for line in lines[1:] if not line.startswith(" ")] == [
        ["commit", "user:"],
        ["review", "user:"],
        ["lint", "project:"],
        ["build", "project:"],
        ["release", "project:"],
    ]
    assert "~/.claude/skills/review" in result.stdout and ".agents/skills/lint" in result.stdout
    assert "allowed-tools: Read, Bash(git:*)" in result.stdout
    shadowed = str(repo / ".claude" / "skills" / "review" / "SKILL.md")
    assert f"warning: {shadowed}: a skill named review was already loaded from" in result.stderr

    listed = run_mm("skills", "list", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    skills = {s["name"]: s for s in json.loads(listed.stdout)}
    release = skills["release"]
    assert release == {
        "name": "release",
        "description": "Publish a release.",
        "source": "project",
        "folder": str(repo / ".claude" / "skills" / "release"),
        "tokens": 8,  # "- release — Publish a release." is 32 bytes in UTF-8
        "body_tokens": 100,  # 400 bytes
        "allowed_tools": ["Read", "Bash(git:*)"],
    }
    assert skills["review"]["description"] == "The user's review checklist."


def test_a_configured_skills_folder_that_does_not_exist_warns_with_file_and_line(
    mm_home: Path, home: Path, scripted: Any
) -> None:
    work = mm_home / "work"
    agent = work / "agent.yaml"
    agent.write_text("# my agent\nskills:\n  - ./skills\n  - ~/no-such-skills\n")
    (work / "skills").mkdir()
    result = run_mm("skills", "list", "--agent", str(agent), cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no skills here; mm looks in:\n  skills\n  ~/no-such-skills\n")
    expected = (
        f"{agent}:4: skills[1]: {home / 'no-such-skills'} does not exist, so no skills are read from it"
    )
    assert f"warning: {expected}" in result.stderr

    scripted([{"text": "Hello."}])
    turn = run_mm("--output-format", "events", "--agent", str(agent), "-p", "hi", cwd=work)
    assert turn.returncode == 0, turn.stderr
    warnings = [e["data"]["message"] for e in stream(turn) if e["kind"] == "warning"]
    assert any(w.startswith(expected) for w in warnings), warnings


def test_allowed_tools_limit_a_turn_through_the_daemon(mm_home: Path, home: Path, scripted: Any) -> None:
    work = mm_home / "work"
    write_skill(
        work / ".claude" / "skills" / "notes",
        "notes",
        "Keep release notes.",
        "allowed-tools: Read, Bash(echo:*)\n",
        body="Read NOTES.md, then echo what you found.\n",
    )
    (work / "NOTES.md").write_text("1.2: fixed the widget\n")

    def tool_call(tool: str, **arguments: Any) -> dict[str, Any]:
        return {"tool_calls": [{"name": tool, "arguments": arguments}]}

    server = scripted(
        [
            tool_call("read_skill", name="notes"),
            tool_call("write_file", path="hacked.txt", content="x"),  # offered before; refused now
            tool_call("bash", command="echo ok > done.txt && touch also.txt"),  # touch is not echo
            tool_call("read_file", path="NOTES.md"),
            tool_call("bash", command="echo ok > done.txt"),
            {"text": "Noted."},
        ]
    )
    result = run_mm("--yolo", "--output-format", "events", "-p", "update the notes", cwd=work)
    assert result.returncode == 0, result.stderr
    events = stream(result)
    assert events[-1]["data"]["status"] == "ok" and events[-1]["data"]["text"] == "Noted."
    assert [e["data"] for e in events if e["kind"] == "skill_tools"] == [
        {"skill": "notes", "tools": ["read_file", "bash(echo:*)"]}
    ]

    offered = [[t["function"]["name"] for t in r["body"]["tools"]] for r in server.requests()]
    assert "write_file" in offered[0]
    assert offered[1:] == [["bash", "read_file", "read_skill"]] * 5
    results = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert [r["ok"] for r in results] == [True, False, False, True, True]
    assert (
        "The skill notes is in use and its allowed-tools do not include write_file" in results[1]["content"]
    )
    assert results[2]["content"] == (
        "The skill notes allows only the commands Bash(echo:*); 'touch also.txt' is not one of them."
    )
    assert not (work / "hacked.txt").exists() and not (work / "also.txt").exists()
    assert (work / "done.txt").read_text() == "ok\n"
