"""A skill in use limits the turn to its allowed-tools: read with read_skill, or chosen at the turn's start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mmd.tools.builtin.skill import ReadSkill
from mmd.tools.registry import Registry
from mmd.tools.skills import Catalogue, load_skills
from mmd.turn.plan import TurnSetup

from ..scripted_provider import ScriptedProvider, Step, answer, call
from .test_turn import Turn


@pytest.fixture
async def turn(tmp_path: Path) -> AsyncIterator[Turn]:
    t = Turn(tmp_path)
    yield t
    t.host.store.close()


def catalogue(tmp_path: Path) -> Catalogue:
    for name, extra in (
        ("lookups", "allowed-tools: lookup\n"),  # mm's own name of a tool
        ("free", ""),  # no allowed-tools: every tool
        ("nothing", "allowed-tools: [WebFetch]\n"),  # names no tool of the turn
    ):
        folder = tmp_path / "skills" / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: x\n{extra}---\nBody of {name}.\n")
    skills, warnings = load_skills([tmp_path / "skills"])
    assert warnings == []
    return skills


async def run(turn: Turn, skills: Catalogue, *steps: Step, **kw: Any) -> ScriptedProvider:
    provider = ScriptedProvider(*steps, choices=kw.pop("choices", ()))
    registry = Registry([ReadSkill(skills), turn.lookup, turn.put])
    setup = TurnSetup(
        provider=provider, model_name=provider.name, system="t", registry=registry, skills=skills, **kw
    )
    turn.session.start()
    await turn.session.run_turn(kw.pop("prompt", "go"), setup)
    return provider


async def test_a_read_skill_narrows_the_next_requests_and_refuses_other_tools(
    turn: Turn, tmp_path: Path
) -> None:
    provider = await run(
        turn,
        catalogue(tmp_path),
        call("read_skill", {"name": "lookups"}),
        call("put", {"key": "a"}),  # seen before the skill was read; refused now
        call("lookup", {"key": "a"}),
        answer("done"),
        yolo=True,
    )
    assert [r.tools for r in provider.requests] == [
        ["read_skill", "lookup", "put"],
        ["read_skill", "lookup"],
        ["read_skill", "lookup"],
        ["read_skill", "lookup"],
    ]
    assert turn.put.ran == [] and turn.lookup.ran == ["a"]
    refused = provider.requests[2].messages[-1].content
    assert refused.startswith(
        "put failed. The skill lookups is in use and its allowed-tools do not include put"
    )
    assert "it allows lookup." in refused and "Fix: Use one of: read_skill, lookup." in refused
    assert turn.events("skill_tools") == [{"skill": "lookups", "tools": ["lookup"]}]


async def test_a_skill_without_allowed_tools_read_next_lifts_the_limit(turn: Turn, tmp_path: Path) -> None:
    provider = await run(
        turn,
        catalogue(tmp_path),
        call("read_skill", {"name": "lookups"}),
        call("read_skill", {"name": "free"}),
        call("put", {"key": "b"}),
        answer("done"),
        yolo=True,
    )
    assert provider.requests[2].tools == ["read_skill", "lookup", "put"]
    assert turn.put.ran == ["b"]
    assert turn.events("skill_tools") == [
        {"skill": "lookups", "tools": ["lookup"]},
        {"skill": "free", "tools": None},
    ]


async def test_an_entry_that_names_no_tool_is_warned_and_allows_nothing(turn: Turn, tmp_path: Path) -> None:
    provider = await run(turn, catalogue(tmp_path), call("read_skill", {"name": "nothing"}), answer("ok"))
    assert provider.requests[1].tools == ["read_skill"]
    [warning] = [w["message"] for w in turn.events("warning")]
    assert warning.startswith("skill nothing: allowed-tools entry 'WebFetch' names no tool of this turn")


async def test_a_skill_chosen_at_the_start_limits_the_first_step(turn: Turn, tmp_path: Path) -> None:
    provider = await run(
        turn,
        catalogue(tmp_path),
        call("lookup", {"key": "c"}),
        answer("c found"),
        choose_skills=True,
        choices=("lookups",),
    )
    assert [r.tools for r in provider.requests] == [["lookup"], ["lookup"]]  # read_skill left: chosen already
    assert turn.lookup.ran == ["c"]
    assert turn.events("skill_tools") == [{"skill": "lookups", "tools": ["lookup"]}]
