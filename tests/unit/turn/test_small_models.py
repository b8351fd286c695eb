"""What a turn does differently for the small models mm serves itself (docs/local.md).

The skill chosen and read before the first step (mmd/turn/skillpick.py), values of domain tools that
must come from the conversation (mmd/turn/grounding.py), and a loop after a success that ends ``ok``.
Same harness as test_turn.py: a real Session and store, the scripted provider, in-process tools.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mmd.contract import ToolResult
from mmd.models.base import Message
from mmd.tools.base import Tool, ToolContext
from mmd.tools.builtin.skill import ReadSkill
from mmd.tools.registry import Registry
from mmd.tools.skills import Catalogue, Skill
from mmd.turn import grounding, skillpick
from mmd.turn.calls import CallRunner
from mmd.turn.plan import TurnSetup

from ..scripted_provider import ScriptedProvider, Step, answer, call
from .test_turn import Turn

SERVICES = {"billing": "up", "search": "down"}


class Status(Tool):
    """A declared-like read tool whose value must come from the conversation."""

    name = "status"
    description = "The status of one service."
    parameters = {
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "format": {"type": "string", "enum": ["short", "long"]},
        },
        "required": ["service"],
    }
    tier = "read"
    source = "declared"

    def __init__(self) -> None:
        self.ran: list[str] = []

    def echo(self, args: dict[str, Any]) -> str:
        return f"status {args['service']}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.ran.append(args["service"])
        if args["service"] == "all":
            return ToolResult(ok=True, content="services: " + ", ".join(SERVICES))
        state = SERVICES.get(args["service"])
        if state is None:
            return ToolResult(
                ok=False, content=f"no service {args['service']}", data={"error": {"code": "nf"}}
            )
        return ToolResult(ok=True, content=f"{args['service']} is {state}")


@pytest.fixture
async def turn(tmp_path: Path) -> AsyncIterator[Turn]:
    t = Turn(tmp_path)
    yield t
    t.host.store.close()


async def run(turn: Turn, tools: list[Tool], *steps: Step, prompt: str, **kw: Any) -> ScriptedProvider:
    provider = ScriptedProvider(*steps, choices=kw.pop("choices", ()))
    system = kw.pop("system", "You are a test.")
    setup = TurnSetup(
        provider=provider, model_name=provider.name, system=system, registry=Registry(tools), **kw
    )
    turn.session.start()
    await turn.session.run_turn(prompt, setup)
    return provider


# --- grounding ------------------------------------------------------------------------------------------


async def test_a_value_from_nowhere_is_answered_not_run_and_the_right_call_then_runs(turn: Turn) -> None:
    status = Status()
    provider = await run(
        turn,
        [status],
        call("status", {"service": "search"}),  # the description's example, not the user's word
        call("status", {"service": "billing"}),
        answer("billing is up."),
        prompt="What is the status of the Billing service?",
        ground_values=True,
    )
    assert status.ran == ["billing"]  # case ignored: "Billing" in the prompt grounds "billing"
    refused = provider.requests[1].messages[-1].content
    assert refused.startswith('status was not run: service "search" appears nowhere')
    assert turn.ended() == {"status": "ok", "text": "billing is up.", "error": None}


async def test_what_grounds_a_value_is_the_history_as_the_turn_began_read_by_the_first_call(
    turn: Turn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The corpus of what was said, the system text in lower case and the undo recorder are made by the
    # turn's first call that needs them (a prompt answered in words makes none), from the history as the
    # turn began: a compaction meanwhile (a new list) does not change what the user said.
    made: list[str] = []
    real = grounding.corpus
    monkeypatch.setattr(grounding, "corpus", lambda *a, **kw: made.append("corpus") or real(*a, **kw))
    await run(turn, [Status()], answer("Nothing to check."), prompt="How is billing?", ground_values=True)
    assert made == []
    turn.session.add_message(Message(role="user", content="Check the Billing service."))
    setup = TurnSetup(
        provider=ScriptedProvider(), model_name="m", system="You ARE a test.", registry=Registry([])
    )
    runner = CallRunner(turn.session, setup)
    turn.session.replace_messages([Message(role="user", content="(a summary)")])
    assert "check the billing service." in runner._said and "(a summary)" not in runner._said
    assert runner._system == "you are a test." and made == ["corpus"]


async def test_a_refused_value_stays_refused_although_the_answer_quoted_it(turn: Turn) -> None:
    status = Status()
    await run(
        turn,
        [status],
        call("status", {"service": "search"}),
        call("status", {"service": "search"}),
        answer("I cannot tell."),
        prompt="How is billing?",
        ground_values=True,
    )
    assert status.ran == []


async def test_a_value_read_in_a_result_may_be_used(turn: Turn) -> None:
    status = Status()
    await run(
        turn,
        [status],
        call("status", {"service": "all"}),
        call("status", {"service": "search"}),  # named by the first result
        answer("search is down."),
        prompt="List every service, then check the status of all of them.",
        ground_values=True,
    )
    assert status.ran == ["all", "search"]


async def test_models_that_route_themselves_and_built_in_tools_are_not_checked(turn: Turn) -> None:
    status = Status()
    await run(turn, [status], call("status", {"service": "search"}), answer("ok"), prompt="How is billing?")
    assert status.ran == ["search"]  # ground_values off: a large model's inference is its own


def test_only_name_like_values_outside_an_enum_are_checked() -> None:
    schema = {
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "format": {"type": "string", "enum": ["short", "long"]},
            "message": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "count": {"type": "integer"},
        },
    }
    args = {
        "service": "search",
        "format": "long",
        "message": "a whole sentence",
        "tags": ["x1", "ok"],
        "count": 7,
    }
    assert grounding.ungrounded(args, schema, "ok, all good") == [("service", "search"), ("tags", "x1")]
    assert grounding.ungrounded({"service": "SEARCH"}, schema, "the search service") == []
    with_default = {"type": "object", "properties": {"env": {"type": "string", "default": "staging"}}}
    assert grounding.ungrounded({"env": "staging"}, with_default, "deploy it") == []  # the contract's fill-in
    assert grounding.ungrounded({"env": "prod"}, with_default, "deploy it") == [("env", "prod")]


def test_the_words_with_digits_of_a_short_value_of_several_words_are_values_too() -> None:
    # The 0.5B ran `release {"version": "2.0.1 stable"}` (the skill's example version) for "the status of
    # billing": as one value with a space it read like text and went unchecked.
    schema = {"type": "object", "properties": {"version": {"type": "string"}, "note": {"type": "string"}}}
    said = "what is the status of the billing service? release 1.4.2 when it is green"
    assert grounding.ungrounded({"version": "2.0.1 stable"}, schema, said) == [("version", "2.0.1")]
    assert grounding.ungrounded({"version": "(1.4.2), beta"}, schema, said) == []
    assert grounding.ungrounded({"note": "ship it when green"}, schema, said) == []  # words, no digits
    long_text = "a release note the model composed itself, long enough to be text: version 9.9.9 is out"
    assert grounding.ungrounded({"note": long_text}, schema, said) == []


# --- a loop after a success ends ok ------------------------------------------------------------------------


class Restart(Status):
    """The same, as a write: restarting a service."""

    name = "restart"
    tier = "write"


async def test_a_loop_after_a_write_succeeded_ends_ok_with_what_succeeded(turn: Turn) -> None:
    status, restart = Status(), Restart()
    failing = [call("status", {"service": "nope"}) for _ in range(4)]
    await run(
        turn,
        [status, restart],
        call("restart", {"service": "billing"}),
        *failing,
        prompt="billing? nope?",
        yolo=True,
    )
    ended = turn.ended()
    assert ended["status"] == "ok"
    assert "restart: billing is up" in ended["text"]
    assert [e["action"] for e in turn.events("loop_detected")][-1] == "stop"


async def test_a_loop_after_only_a_read_succeeded_is_still_a_loop(turn: Turn) -> None:
    status = Status()
    failing = [call("status", {"service": "nope"}) for _ in range(4)]
    await run(turn, [status], call("status", {"service": "billing"}), *failing, prompt="billing? nope?")
    assert turn.ended()["status"] == "loop"  # what was asked for may be the failing call


async def test_a_loop_of_a_refused_value_after_the_asked_read_ran_ends_ok(turn: Turn) -> None:
    # contrib/eval, the 0.5B: `pkgtest greet` ran, then a refused `release 1.4.2 stable` was sent until the
    # loop detector stopped the turn; a value nobody gave cannot be what was asked for.
    status, restart = Status(), Restart()
    refused = [call("restart", {"service": "search"}) for _ in range(4)]
    await run(
        turn,
        [status, restart],
        call("status", {"service": "billing"}),
        *refused,
        prompt="How is billing?",
        ground_values=True,
        yolo=True,
    )
    ended = turn.ended()
    assert ended["status"] == "ok" and "status: billing is up" in ended["text"]
    assert restart.ran == []


async def test_a_loop_of_arguments_the_contract_refuses_after_the_same_tool_succeeded_ends_ok(
    turn: Turn,
) -> None:
    # contrib/eval at fcc83da, the 0.5B: `pkgtest greet` ran, then pkgtest was sent its own past call and a
    # made-up tool_response as one string of arguments until stopped, status loop although the action ran.
    status = Status()
    babble = '{"name": "status", "arguments": {"service": "billing"}}\n{"name": "tool_response"}'
    junk = [call("status", babble) for _ in range(4)]
    await run(turn, [status], call("status", {"service": "billing"}), *junk, prompt="How is billing?")
    ended = turn.ended()
    assert ended["status"] == "ok" and "status: billing is up" in ended["text"]


async def test_a_loop_of_refused_arguments_for_another_tool_is_still_a_loop(turn: Turn) -> None:
    status, restart = Status(), Restart()
    junk = [call("restart", "not json") for _ in range(4)]
    await run(
        turn, [status, restart], call("status", {"service": "billing"}), *junk, prompt="billing?", yolo=True
    )
    assert turn.ended()["status"] == "loop"  # what was asked for may be the call it cannot write


async def test_a_loop_with_nothing_done_still_ends_as_a_loop(turn: Turn) -> None:
    status = Status()
    await run(turn, [status], *[call("status", {"service": "nope"}) for _ in range(4)], prompt="nope?")
    assert turn.ended()["status"] == "loop"


# --- the skill chosen at the start ------------------------------------------------------------------------


def catalogue(tmp_path: Path) -> Catalogue:
    skills = {}
    for name, body in (("release-ops", "Run ./release VERSION."), ("db-ops", "Run ./backup DB.")):
        folder = tmp_path / "skills" / name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: x\n---\n{body}\n")
        skills[name] = Skill(
            name=name, description=f"How to do {name}.", keywords=(), folder=folder, body=body
        )
    return Catalogue(skills)


async def test_the_chosen_skill_is_in_the_first_step_and_read_skill_is_not(
    turn: Turn, tmp_path: Path
) -> None:
    skills = catalogue(tmp_path)
    provider = await run(
        turn,
        [ReadSkill(skills), Status()],
        answer("Released."),
        prompt="Publie la version 1.4.2",
        choose_skills=True,
        skills=skills,
        system="You are a test.\n\n" + skills.render(),
        choices=("release-ops",),
    )
    [(asked, options)] = provider.choice_requests
    assert options == ["release-ops", "db-ops", "none"]
    assert "- release-ops: How to do release-ops." in asked[0].content
    assert asked[1].content == "Publie la version 1.4.2"
    [chosen] = turn.events("skill_chosen")
    assert chosen["skill"] == "release-ops" and chosen["options"] == ["release-ops", "db-ops"]
    [first] = provider.requests
    assert [m.role for m in first.messages] == ["system", "user"]
    system = first.messages[0].content
    assert "The skill release-ops applies to this request" in system and "Run ./release VERSION." in system
    assert skills.render() not in system  # the list that says to call read_skill is gone
    assert first.tools == ["status"]
    assert first.lead == "call"  # the skill says how to act: the first step acts
    assert str(skills.get("release-ops").folder) not in system  # no files of its own: no folder to cd into
    assert turn.events("tool_call") == []
    # Not in the stored history: the next turn chooses again.
    assert all("Run ./release VERSION." not in m.content for m in turn.session.messages)


@pytest.mark.parametrize("choice", ["none", "not-a-skill"])
async def test_no_skill_is_given_when_none_applies(turn: Turn, tmp_path: Path, choice: str) -> None:
    skills = catalogue(tmp_path)
    provider = await run(
        turn,
        [ReadSkill(skills)],
        answer("Hi."),
        prompt="hello",
        choose_skills=True,
        skills=skills,
        choices=(choice,),
    )
    assert turn.events("skill_chosen")[0]["skill"] is None
    assert provider.requests[0].tools == ["read_skill"]
    assert provider.requests[0].lead == "free"
    assert "applies to this request" not in provider.requests[0].messages[0].content


async def test_after_the_first_call_of_a_chosen_skill_the_steps_are_free_again(
    turn: Turn, tmp_path: Path
) -> None:
    skills = catalogue(tmp_path)
    status = Status()
    provider = await run(
        turn,
        [ReadSkill(skills), status],
        call("status", {"service": "nope"}),  # fails: the next step may act again, or answer
        call("status", {"service": "billing"}),
        answer("billing is up."),
        prompt="status of billing",
        choose_skills=True,
        skills=skills,
        choices=("db-ops",),
    )
    assert [r.lead for r in provider.requests] == ["call", "free", "free"]
    assert status.ran == ["nope", "billing"]


def test_a_skill_with_files_of_its_own_names_its_folder_and_where_commands_run(tmp_path: Path) -> None:
    skills = catalogue(tmp_path)
    skill = skills.get("db-ops")
    assert str(skill.folder) not in skillpick.skill_text(skill)
    (skill.folder / "restore.md").write_text("How to restore.")
    text = skillpick.skill_text(skill)
    assert str(skill.folder) in text and "run commands from the working directory" in text


async def test_models_that_route_themselves_choose_nothing(turn: Turn, tmp_path: Path) -> None:
    skills = catalogue(tmp_path)
    provider = await run(turn, [ReadSkill(skills)], answer("Hi."), prompt="release 2.0", skills=skills)
    assert provider.choice_requests == [] and turn.events("skill_chosen") == []


async def test_a_choice_the_model_is_unsure_of_gives_the_skill_but_leaves_the_first_step_free(
    turn: Turn, tmp_path: Path
) -> None:
    skills = catalogue(tmp_path)
    below = skillpick.ACT_CONFIDENCE / 2
    provider = await run(
        turn,
        [ReadSkill(skills), Status()],
        answer("Hello."),
        prompt="Hi, who are you?",
        choose_skills=True,
        skills=skills,
        choices=(("release-ops", below),),
    )
    [chosen] = turn.events("skill_chosen")
    assert chosen["skill"] == "release-ops" and chosen["probability"] == round(below, 3)
    [first] = provider.requests
    assert "The skill release-ops applies" in first.messages[0].content
    assert first.lead == "free"  # a wrong choice must not force a call on a request nobody asked to act on


# --- the commands of the skill in use (mmd/tools/skillcmds.py) ----------------------------------------------


class FakeBash(Tool):
    """bash as the turn sees it: runs nothing, knows one program, fails like bash for any other."""

    name = "bash"
    description = "Run a command."
    parameters = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    tier = "read"

    def __init__(self) -> None:
        self.ran: list[str] = []

    def echo(self, args: dict[str, Any]) -> str:
        return f"$ {args['command']}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.ran.append(args["command"])
        if args["command"].startswith("./release "):
            return ToolResult(ok=True, content="Released.\n[exit code 0]", data={"exit_code": 0})
        program = args["command"].split()[0]
        return ToolResult(
            ok=False, content=f"bash: {program}: command not found\n[exit code 127]", data={"exit_code": 127}
        )


def release_script(turn: Turn) -> Path:
    """The skill's `./release` in the session's folder: a real program that logs its arguments."""
    work = Path(turn.session.cwd)
    work.mkdir(parents=True, exist_ok=True)
    (work / "release").write_text('#!/bin/sh\necho "$@" >> released.txt\necho "Released $1."\n')
    (work / "release").chmod(0o755)
    return work


def release_skill(tmp_path: Path) -> Catalogue:
    body = "Publish a release: `./release VERSION`.\nExample: `./release 2.0.1`"
    folder = tmp_path / "skills" / "release-ops"
    folder.mkdir(parents=True)
    skill = Skill(name="release-ops", description="Releases.", keywords=(), folder=folder, body=body)
    return Catalogue({"release-ops": skill})


async def test_under_a_chosen_skill_an_example_value_is_refused_and_a_guessed_command_is_told_the_skills(
    turn: Turn, tmp_path: Path
) -> None:
    skills, bash = release_skill(tmp_path), FakeBash()
    provider = await run(
        turn,
        [ReadSkill(skills), bash],
        call("bash", {"command": "./release 2.0.1"}),  # the skill's example, not the user's version
        call("bash", {"command": "release 1.4.2"}),  # a guess: not on PATH
        call("bash", {"command": "./release 1.4.2"}),
        answer("Released 1.4.2."),
        prompt="Publish version 1.4.2, please.",
        choose_skills=True,
        ground_values=True,
        skills=skills,
        choices=("release-ops",),
    )
    assert bash.ran == ["release 1.4.2", "./release 1.4.2"]  # the example value never ran
    refused = provider.requests[1].messages[-1].content
    assert refused.startswith(
        'bash was not run: "2.0.1" is the example value for VERSION in the skill release-ops'
    )
    assert refused.endswith("The user's request: «Publish version 1.4.2, please.».")
    guessed = provider.requests[2].messages[-1].content
    assert guessed.startswith("bash: release: command not found\n[exit code 127]\n")
    assert guessed.endswith(
        "The skill release-ops runs this as `./release VERSION`, from the working directory, "
        "with the values from the user's request in place of the placeholders."
    )
    assert turn.ended()["status"] == "ok"
    # The refusal quoted "2.0.1" back, and the skill's text holds it: neither grounds it in the next turn.
    provider = await run(
        turn,
        [ReadSkill(skills), bash],
        call("bash", {"command": "./release 2.0.1"}),
        answer("Not released."),
        prompt="And again.",
        choose_skills=True,
        ground_values=True,
        skills=skills,
        choices=("release-ops",),
    )
    assert bash.ran == ["release 1.4.2", "./release 1.4.2"]


async def test_a_model_that_routes_itself_runs_what_it_asks_and_still_hears_the_skills_commands(
    turn: Turn, tmp_path: Path
) -> None:
    skills, bash = release_skill(tmp_path), FakeBash()
    provider = await run(
        turn,
        [ReadSkill(skills), bash],
        call("read_skill", {"name": "release-ops"}),
        call("bash", {"command": "./release 2.0.1"}),  # a large model's choice is its own
        call("bash", {"command": "make release"}),
        answer("Done."),
        prompt="Publish the version after 2.0.0.",
        skills=skills,
    )
    assert bash.ran == ["./release 2.0.1", "make release"]
    hinted = provider.requests[3].messages[-1].content
    assert hinted.endswith(
        "This is not a command the skill release-ops names. Its commands, run from the "
        "working directory: `./release VERSION`."
    )


@pytest.mark.parametrize(("body", "lead"), [(None, "call"), ("Be careful with releases.", "free")])
async def test_the_step_after_reading_a_skill_acts_when_the_skill_names_commands(
    turn: Turn, tmp_path: Path, body: str | None, lead: str
) -> None:
    skills, bash = release_skill(tmp_path), FakeBash()
    if body is not None:
        skills = Catalogue({"release-ops": with_body(skills.get("release-ops"), body)})
    provider = await run(
        turn,
        [ReadSkill(skills), bash],
        call("read_skill", {"name": "release-ops"}),
        call("bash", {"command": "./release 1.4.2"}),
        answer("Released 1.4.2."),
        prompt="Publish version 1.4.2.",
        words_after_success=True,
        skills=skills,
    )
    # Reading know-how is not the job done: no words-first step after it (the 0.5B then made results up),
    # and read_skill leaves the turn (the 0.5B's one call was read_skill again).
    assert [r.lead for r in provider.requests] == ["free", lead, "words"]
    assert [r.tools for r in provider.requests] == [["read_skill", "bash"], ["bash"], ["bash"]]
    assert bash.ran == ["./release 1.4.2"]


def with_body(skill: Skill, body: str) -> Skill:
    return Skill(name=skill.name, description=skill.description, keywords=(), folder=skill.folder, body=body)


async def test_the_chosen_skills_commands_are_offered_as_typed_tools_and_run_without_a_shell(
    turn: Turn, tmp_path: Path
) -> None:
    """For the models mm constrains, `./release VERSION` becomes a tool `release {version}` (skillcmds.py)."""
    work = release_script(turn)
    skills, bash = release_skill(tmp_path), FakeBash()
    provider = await run(
        turn,
        [ReadSkill(skills), bash],
        call("release", {"version": "2.0.1"}),  # the skill's example: a value from nowhere
        call("release", {"version": "1.4.2; rm -rf ."}),  # one argv entry, no shell
        call("release", {"version": "1.4.2"}),
        answer("Released 1.4.2."),
        prompt="Publish version 1.4.2 (not 1.4.2; rm -rf . — that is a test).",
        choose_skills=True,
        ground_values=True,
        skill_tools=True,
        yolo=True,
        skills=skills,
        choices=("release-ops",),
    )
    assert provider.requests[0].tools == ["bash", "release"]  # read_skill gone, the command a tool
    assert [e for e in turn.events("skill_commands")] == [{"skill": "release-ops", "tools": ["release"]}]
    assert (work / "released.txt").read_text() == "1.4.2; rm -rf .\n1.4.2\n"
    assert provider.requests[1].messages[-1].content.startswith('release was not run: version "2.0.1"')
    assert bash.ran == [] and turn.ended()["status"] == "ok"


async def test_a_skill_with_allowed_tools_keeps_to_them_and_no_command_is_added(
    turn: Turn, tmp_path: Path
) -> None:
    skills = release_skill(tmp_path)
    skill = skills.get("release-ops")
    limited = Skill(
        name=skill.name,
        description="x",
        keywords=(),
        folder=skill.folder,
        body=skill.body,
        allowed_tools=("Bash",),
    )
    provider = await run(
        turn,
        [ReadSkill(skills), FakeBash()],
        answer("Nothing to do."),
        prompt="Publish 1.4.2",
        choose_skills=True,
        skill_tools=True,
        skills=Catalogue({"release-ops": limited}),
        choices=("release-ops",),
    )
    assert provider.requests[0].tools == ["bash"] and turn.events("skill_commands") == []


async def test_a_skill_read_by_the_model_does_not_make_its_own_examples_values_the_user_gave(
    turn: Turn, tmp_path: Path
) -> None:
    """read_skill's result holds the skill's examples (`./release 2.0.1`); they must not ground a value, for
    the skill's typed tools as for bash (the 0.5B ran `status search` for "the status of billing")."""
    work = release_script(turn)
    skills, bash = release_skill(tmp_path), FakeBash()
    provider = await run(
        turn,
        [ReadSkill(skills), bash],
        call("read_skill", {"name": "release-ops"}),
        call("release", {"version": "2.0.1"}),
        call("bash", {"command": "./release 2.0.1"}),
        call("release", {"version": "1.4.2"}),
        answer("Released 1.4.2."),
        prompt="Publish version 1.4.2.",
        ground_values=True,
        words_after_success=True,
        skill_tools=True,
        yolo=True,
        skills=skills,
    )
    assert (work / "released.txt").read_text() == "1.4.2\n" and bash.ran == []
    refused = [r.messages[-1].content for r in provider.requests[2:4]]
    assert refused[0].startswith('release was not run: version "2.0.1" appears nowhere')
    assert refused[1].startswith('bash was not run: "2.0.1" is the example value for VERSION')


async def test_mms_own_answer_sent_back_as_a_value_is_not_run(turn: Turn) -> None:
    """Seen with the 0.5B: ticket {"id": "Not run again: this exact ticket call already succeeded …"}."""
    status = Status()
    echoed = "Not run again: this exact status call already succeeded in this turn"
    provider = await run(
        turn,
        [status],
        call("status", {"service": echoed}),
        answer("I could not tell."),
        prompt=f"What is the status of billing? ({echoed})",  # even where the user's words hold it
        ground_values=True,
    )
    assert status.ran == []
    assert provider.requests[1].messages[-1].content.startswith(f'status was not run: service "{echoed}"')
