"""Reads outside the project ask first: the file tools are confined to the session's directory.

``read_file`` read ``/etc/shadow`` and ``~/.bash_history`` without any ask. Now a real daemon
and the scripted model show: a read tool (``read_file``, ``list_files``, ``grep``) whose path
is outside the session's directory (its spill files and the skill folders excepted) asks,
naming the path; a symbolic link in the project that points outside counts as outside; with
nobody to ask (``mm -p`` without a terminal) the call is denied and ``mm`` exits 3; ``--yolo``
runs it; "always allow" a folder lets later reads in it through, and nothing beside it. The
write tools are confined the same way: an "always" rule for the whole tool does not reach
outside the project. The test process is the interactive client (tests/e2e/test_consent.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mm.connection import Client

from mmd.rpc import RPCError

from ..conftest import run_mm
from ..test_consent import (
    always,
    connect,
    events_until_end,
    no_ask,
    prompt,
    rules,
    run_on_pty,
    run_turn,
)
from .serves import assert_daemon_serves

SYSTEM_FILE = "/etc/passwd"


@pytest.fixture
def client(daemon: Any) -> Iterator[Client]:
    c = connect("outside-test")
    yield c
    c.close()


@pytest.fixture
def outside(mm_home: Path) -> Path:
    """A folder beside the project, with a secret file and a sibling folder."""
    folder = mm_home / "outside"
    (folder / "deeper").mkdir(parents=True)
    (folder / "secret.txt").write_text("the outside secret\n")
    (folder / "deeper" / "more.txt").write_text("more outside text\n")
    (mm_home / "sibling").mkdir()
    (mm_home / "sibling" / "other.txt").write_text("sibling text\n")
    return folder


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tool_texts(server: Any) -> str:
    """Every tool result the model was sent, as one text."""
    return json.dumps([m for r in server.requests() for m in r["body"]["messages"] if m["role"] == "tool"])


def test_read_file_outside_asks_naming_the_path(mm_home: Path, scripted: Any, client: Client) -> None:
    work = mm_home / "work"
    server = scripted([call("read_file", path=SYSTEM_FILE), {"text": "read"}])
    turn = run_turn(client, work, always("allow_once"))
    [ask] = turn.of("consent_needed")
    assert ask["tool"] == "read_file" and ask["paths"] == [SYSTEM_FILE] and ask["access"] == "read"
    assert ask["cwd"] == str(work) and ask["command"] is None
    assert turn.ended["status"] == "ok" and "root:" in tool_texts(server)
    assert rules() == []  # allow once remembers nothing
    assert_daemon_serves(mm_home)


def test_a_symlink_in_the_project_pointing_outside_is_outside(
    mm_home: Path, scripted: Any, client: Client, outside: Path
) -> None:
    work = mm_home / "work"
    (work / "notes.txt").symlink_to(outside / "secret.txt")
    (work / "docs").symlink_to(outside)
    (work / "inside.txt").write_text("inside text\n")
    server = scripted(
        [
            {
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": "notes.txt"}},
                    {"name": "list_files", "arguments": {"path": "docs"}},
                    {"name": "grep", "arguments": {"pattern": "secret", "path": "docs"}},
                    {"name": "grep", "arguments": {"pattern": "text"}},  # the project: no ask
                    {"name": "read_file", "arguments": {"path": "inside.txt"}},  # no ask
                ]
            },
            {"text": "done"},
        ]
    )
    turn = run_turn(client, work, always("deny", reason="stay in the project"))
    asks = turn.of("consent_needed")
    assert [(a["tool"], a["paths"]) for a in asks] == [
        ("read_file", [str(outside / "secret.txt")]),
        ("list_files", [str(outside)]),
        ("grep", [str(outside)]),
    ]
    sent = tool_texts(server)
    assert "the outside secret" not in sent and "stay in the project" in sent
    # grep over the project does not follow the link out; the file inside is read.
    assert "inside.txt:1:inside text" in sent and "inside text" in sent
    assert_daemon_serves(mm_home)


def test_headless_is_denied_with_exit_3(mm_home: Path, scripted: Any, daemon: Any) -> None:
    work = mm_home / "work"
    server = scripted([call("read_file", path=SYSTEM_FILE)])
    result = run_mm("-p", "read it", cwd=work)
    assert result.returncode == 3, result.stderr
    said = " ".join(result.stderr.split())
    assert "no one to ask" in said and f"read {SYSTEM_FILE}, outside the working directory" in said
    assert "--yolo" in said
    assert "root:" not in tool_texts(server) and "root:" not in result.stdout
    assert_daemon_serves(mm_home)


def test_yolo_reads_outside_without_asking(mm_home: Path, scripted: Any, daemon: Any) -> None:
    work = mm_home / "work"
    server = scripted([call("read_file", path=SYSTEM_FILE), {"text": "read"}])
    result = run_mm("--yolo", "-p", "read it", cwd=work)
    assert result.returncode == 0, result.stderr
    assert "root:" in tool_texts(server)
    assert_daemon_serves(mm_home)


def test_always_allow_a_folder_lets_later_reads_in_it_through(
    mm_home: Path, scripted: Any, client: Client, outside: Path
) -> None:
    work = mm_home / "work"
    server = scripted(
        [
            call("read_file", path=str(outside / "secret.txt")),
            {"text": "first"},
            {
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": str(outside / "deeper" / "more.txt")}},
                    {"name": "list_files", "arguments": {"path": str(outside)}},
                    {"name": "grep", "arguments": {"pattern": "text", "path": str(outside)}},
                    {"name": "read_file", "arguments": {"path": str(mm_home / "sibling" / "other.txt")}},
                ]
            },
            {"text": "second"},
        ]
    )
    session_id, after = prompt(client, work)
    refused: list[str] = []

    def folder_rule(ask: dict[str, Any]) -> dict[str, Any]:
        # A folder that does not hold the path is refused while the ask waits.
        try:
            client.call(
                "consent.answer",
                {
                    "session_id": session_id,
                    "request_id": ask["request_id"],
                    "decision": "allow_always",
                    "rule": str(mm_home / "sibling"),
                },
            )
        except RPCError as exc:
            refused.append(exc.message)
        return {"decision": "allow_always", "rule": str(outside)}

    first = events_until_end(client, session_id, after, folder_rule)
    assert first.ended["status"] == "ok"
    assert len(refused) == 1 and "does not hold" in refused[0] and "still pending" in refused[0]
    [rule] = rules()
    assert (rule["tool"], rule["kind"], rule["rule"]) == ("outside:read", "path", str(outside))

    def only_the_sibling(ask: dict[str, Any]) -> dict[str, Any]:
        assert ask["paths"] == [str(mm_home / "sibling" / "other.txt")], ask
        return {"decision": "deny"}

    second = run_turn(client, work, only_the_sibling, session_id=session_id)
    assert len(second.of("consent_needed")) == 1
    assert [a["by"] for a in second.of("consent_answered")][:3] == [f"ledger rule {rule['id']}"] * 3
    sent = tool_texts(server)
    assert "more outside text" in sent and f"{outside}/deeper/" in sent
    assert f"{outside}/deeper/more.txt:1:more outside text" in sent
    assert "sibling text" not in sent

    listed = run_mm("consent", "list", cwd=work)
    assert f"allow outside:read path: {outside}" in listed.stdout
    assert run_mm("consent", "revoke", str(rule["id"])).returncode == 0
    assert_daemon_serves(mm_home)


def test_write_tools_are_confined_the_same_way(
    mm_home: Path, scripted: Any, client: Client, outside: Path
) -> None:
    work = mm_home / "work"
    target = outside / "written.txt"
    scripted(
        [
            call("write_file", path="inside.txt", content="in\n"),
            {"text": "inside"},
            call("write_file", path=str(target), content="out\n"),
            {"text": "outside"},
            call("read_file", path=str(outside / "secret.txt")),
            {"text": "read"},
            call("write_file", path=str(outside / "deeper" / "x.txt"), content="x\n"),
            {"text": "written?"},
        ]
    )
    first = run_turn(client, work, always("allow_always"))  # "always write_file", for the project
    assert first.ended["status"] == "ok" and (work / "inside.txt").read_text() == "in\n"
    [tool_rule] = rules()
    assert (tool_rule["tool"], tool_rule["kind"]) == ("write_file", "tool")

    # The tool rule does not reach outside the project: the write asks, naming the path.
    second = run_turn(client, work, always("deny"), session_id=first.session_id)
    [ask] = second.of("consent_needed")
    assert ask["paths"] == [str(target)] and ask["access"] == "write"
    assert not target.exists()

    # A folder allowed for reading is not allowed for writing.
    third = run_turn(client, work, always("allow_always", rule=str(outside)), session_id=first.session_id)
    assert third.of("consent_needed")[0]["access"] == "read"
    fourth = run_turn(client, work, always("deny"), session_id=first.session_id)
    [ask] = fourth.of("consent_needed")
    assert ask["access"] == "write" and ask["paths"] == [str(outside / "deeper" / "x.txt")]
    assert not (outside / "deeper" / "x.txt").exists()
    assert_daemon_serves(mm_home)


def test_spill_files_and_the_project_never_ask(mm_home: Path, scripted: Any, client: Client) -> None:
    work = mm_home / "work"
    (work / "here.txt").write_text("here\n")
    flood = "seq 1 20000"
    scripted([call("bash", command=flood), {"text": "flooded"}])

    def bash_only(ask: dict[str, Any]) -> dict[str, Any]:
        assert ask["tool"] == "bash", ask
        return {"decision": "allow_once"}

    first = run_turn(client, work, bash_only)
    [result] = first.of("tool_result")
    spill = result["data"]["output_file"]
    assert os.path.commonpath([spill, str(work)]) != str(work)  # the spill file is outside the project
    scripted(
        [
            {
                "tool_calls": [
                    {"name": "read_file", "arguments": {"path": spill, "offset": 19990}},
                    {"name": "read_file", "arguments": {"path": "here.txt"}},
                ]
            },
            {"text": "read"},
        ]
    )
    second = run_turn(client, work, no_ask, session_id=first.session_id)  # the spill file is its own
    assert all(r["ok"] for r in second.of("tool_result"))
    assert_daemon_serves(mm_home)


@pytest.mark.parametrize("bad_folder_first", [False, True], ids=["folder", "bad-folder-asked-again"])
def test_the_cli_asks_naming_the_path_and_takes_a_folder(
    mm_home: Path, scripted: Any, daemon: Any, outside: Path, bad_folder_first: bool
) -> None:
    """`mm -p` on a terminal: the ask names the path; [f] takes a folder that holds it."""
    work = mm_home / "work"
    scripted([call("read_file", path=str(outside / "deeper" / "more.txt")), {"text": "finished"}])
    dialogue = [("allow?", "f"), ("folder to allow", str(mm_home / "sibling"))] if bad_folder_first else []
    dialogue += [("allow?", "f"), ("folder to allow", str(outside))]
    code, printed = run_on_pty(["-p", "read it"], work, dialogue)
    text = " ".join(printed.split())
    assert code == 0, text
    assert f"read_file wants to read outside {work}: {outside / 'deeper' / 'more.txt'}" in text
    assert "[a] always this path [f] a folder" in text and "finished" in text
    assert ("does not hold" in text) is bad_folder_first
    assert [(r["tool"], r["kind"], r["rule"]) for r in rules()] == [("outside:read", "path", str(outside))]
    assert_daemon_serves(mm_home)


def test_a_clones_agent_file_cannot_make_another_folder_a_skill_folder(
    mm_home: Path, scripted: Any, daemon: Any
) -> None:
    # Skill folders are read without asking, and skills: needs no trust: a cloned repository's mm.yaml
    # named another project's skills, and the model read that project's files unasked. Now such a file
    # waits for `mm trust` (the prompt goes without it), and the read asks: headless, exit 3.
    other = mm_home / "other" / ".claude" / "skills"
    (other / "deploy").mkdir(parents=True)
    (other / "deploy" / "SKILL.md").write_text("---\nname: deploy\ndescription: Deploy prod.\n---\nSteps.\n")
    (other / "deploy" / "creds.txt").write_text("the other project's secret\n")
    work = mm_home / "work"
    (work / "mm.yaml").write_text(f"skills: [{other}]\n")
    server = scripted([call("read_file", path=str(other / "deploy" / "creds.txt"))])
    result = run_mm("-p", "read it", cwd=work)
    assert result.returncode == 3, result.stderr
    said = " ".join(result.stderr.split())
    assert f"{work / 'mm.yaml'} names what mm would run (skills: {other}, outside the project" in said
    assert "Deploy prod." not in json.dumps(server.requests()[0]["body"])
    assert "secret" not in tool_texts(server) and "secret" not in result.stdout
    # Trusted as it is, the file's folder is the person's choice: its skill is offered.
    assert run_mm("trust", "--yes", cwd=work).returncode == 0
    listed = run_mm("skills", "list", "--json", cwd=work)
    assert [s["name"] for s in json.loads(listed.stdout)] == ["deploy"], listed.stderr
    assert_daemon_serves(mm_home)
