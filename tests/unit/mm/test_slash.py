"""The chat's slash commands (clients/mm/slash.py): what needs no daemon, in process.

The commands that ask the daemon (/tools, /skills, /model, /resume, /usage) run against a real one
in tests/e2e/test_chat.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from mm import slash


class Chat:
    """A chat that records what it says; a command that asks the daemon fails the test."""

    def __init__(self) -> None:
        self.opts: dict[str, Any] = {"continue_": True}
        self.session_id: str | None = "3fa2b1"
        self.said: list[str] = []

    def say(self, text: str) -> None:
        self.said.append(text)

    def call(self, method: str, params: dict[str, Any]) -> Any:
        raise AssertionError(f"asked the daemon: {method}")


@pytest.mark.parametrize("line", ["/exit", "/quit", "  /exit  "])
def test_exit_and_its_alias_end_the_chat(line: str) -> None:
    assert slash.run(Chat(), line) is True


def test_an_unknown_command_lists_the_commands_and_suggests_the_closest() -> None:
    chat = Chat()
    assert slash.run(chat, "/hepl me") is False
    [said] = chat.said
    assert said.startswith("unknown command /hepl — did you mean /help? (nothing was sent to the model)")
    for name, _, _ in slash.COMMANDS:
        assert name in said


def test_help_lists_every_command_and_the_keys() -> None:
    chat = Chat()
    slash.run(chat, "/help")
    [said] = chat.said
    for name, takes, does in slash.COMMANDS:
        assert f"{name} {takes}".strip() in said and does in said
    assert "Alt-Enter" in said and "Ctrl-D" in said


def test_model_with_a_name_is_used_from_the_next_message_on() -> None:
    chat = Chat()
    slash.run(chat, "/model coder")
    assert chat.opts["model"] == "coder"
    slash.run(chat, "/model")
    assert chat.said[-1].startswith("model: coder (chosen in this chat")


def test_clear_starts_a_new_session_and_compact_needs_one() -> None:
    chat = Chat()
    slash.run(chat, "/clear")
    assert chat.session_id is None and chat.opts["continue_"] is False
    slash.run(chat, "/compact")
    slash.run(chat, "/cost")
    assert chat.said[1:] == [
        "nothing to compact yet: this chat has no session",
        "no session yet: usage counts start with your first message",
    ]


def step(inp: int, out: int, **timings: int) -> dict[str, Any]:
    data: dict[str, Any] = {"text": "", "tool_calls": [], "usage": {"input": inp, "output": out}}
    if timings:
        data["timings"] = timings
    return {"kind": "assistant", "data": data}


def test_usage_adds_up_the_steps_of_every_turn() -> None:
    events = [
        {"kind": "turn_started", "data": {}},
        step(1200, 30),
        {"kind": "tool_call", "data": {"name": "bash"}},
        step(1300, 45, cached_tokens=1100),
        {"kind": "turn_ended", "data": {"status": "ok"}},
        {"kind": "turn_started", "data": {}},
        {"kind": "assistant", "data": {"text": "", "tool_calls": [], "usage": None}},
        {"kind": "turn_ended", "data": {"status": "error"}},
    ]
    assert slash.usage_report("3fa2b1", events) == (
        "session 3fa2b1: 2 turns, 3 model steps, 1 tool call\n"
        "tokens: 2,500 in (1,100 of the input from the server's prompt cache), 75 out, "
        "as the model server counted them (mm puts no price on them)"
    )


class Answering(Chat):
    """A chat whose daemon answers with canned results, recording what was asked."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__()
        self.answers = answers
        self.asked: list[tuple[str, dict[str, Any]]] = []

    def call(self, method: str, params: dict[str, Any]) -> Any:
        self.asked.append((method, params))
        return self.answers[method]


STEP = {"step": 2, "call_id": "c", "tool": "bash", "echo": "$ rm a", "ts": 0.0,
        "files": [{"path": "a", "change": "deleted"}]}  # fmt: skip


def test_diff_lists_the_steps_and_shows_the_diff() -> None:
    chat = Answering({"session.diff": {"steps": [STEP], "diff": "-gone\n", "truncated": False}})
    slash.run(chat, "/diff 2")
    assert chat.asked == [("session.diff", {"session_id": "3fa2b1", "step": 2})]
    assert "step   2" in chat.said[0] and "bash: $ rm a" in chat.said[0] and "D a" in chat.said[0]
    assert chat.said[0].endswith("-gone")


def test_undo_sends_the_step_and_force_and_says_how_to_put_the_files_back() -> None:
    chat = Answering({"session.undo": {"step": 3, "undone": 2, "files": [{"path": "a", "change": "added"}]}})
    slash.run(chat, "/undo 2 --force")
    assert chat.asked == [("session.undo", {"session_id": "3fa2b1", "force": True, "to_step": 2})]
    assert chat.said == ["restored to before step 2: A a\n(this undo is step 3: /undo puts the files back)"]


def test_a_step_that_is_not_a_number_is_refused_before_the_daemon_is_asked() -> None:
    from mmd.rpc import RPCError

    with pytest.raises(RPCError, match="not a step number"):
        slash.run(Chat(), "/undo last")
