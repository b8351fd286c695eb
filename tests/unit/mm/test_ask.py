"""Consent questions in the terminal (clients/mm/ask.py): which reply stands for which answer.

Ctrl-C at the question in a real chat (the call denied, the chat going on) is in tests/e2e/test_chat.py.
"""

from __future__ import annotations

import pytest
from mm import ask


def decide(reply: str, follow_up: str = "", **offered: object) -> dict[str, object] | None:
    """ask.decision() for *reply*, with *follow_up* typed at the question it asks next, if any."""
    asked: list[str] = []

    def typed(question: str, default: str, watch: object = None) -> str:
        asked.append(question)
        return follow_up if follow_up.strip() else default

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ask, "read_reply", typed)
        answer = ask.decision(reply, **{"bash": False, "paths": [], "dry": False, **offered})  # type: ignore[arg-type]
    assert len(asked) <= 1
    return answer


@pytest.mark.parametrize(
    ("reply", "offered", "answer"),
    [
        ("y", {}, {"decision": "allow_once"}),
        ("yes", {}, {"decision": "allow_once"}),
        ("a", {}, {"decision": "allow_always"}),
        ("d", {"dry": True}, {"decision": "dry_run"}),
        ("d", {}, None),  # no dry run offered: not a choice
        ("p", {}, None),  # a prefix only for bash
        ("f", {}, None),  # a folder only for paths outside the project
        ("maybe", {}, None),
    ],
)
def test_replies_that_need_nothing_more(reply: str, offered: dict[str, object], answer: object) -> None:
    assert decide(reply, **offered) == answer


def test_a_prefix_a_folder_and_a_reason_are_asked_for() -> None:
    assert decide("p", "git status", bash=True) == {"decision": "allow_always", "rule": "git status"}
    folder = decide("f", "/srv/data", paths=["/srv/data/a.txt"])
    assert folder == {"decision": "allow_always", "rule": "/srv/data"}
    assert decide("n", "not now") == {"decision": "deny", "reason": "not now"}
