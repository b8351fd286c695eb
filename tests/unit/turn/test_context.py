"""The context budget at work in a real session (mmd/turn/context.py): outputs cut to their share of the
window, old outputs replaced by stubs, older messages summarised, requests that cannot fit never sent.

A real :class:`~mmd.turn.session.Session` on a real store, the in-process scripted provider, and token
counts by the estimate (UTF-8 bytes / 4) or by a counter written here. The pure arithmetic is
tests/unit/turn/test_budget.py; over the real daemon tests/e2e/test_context.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mmd.contract import ToolResult
from mmd.models.base import Message, ToolSpec
from mmd.models.tokens import Counter, estimate
from mmd.store import Store
from mmd.tools.base import Limits, Tool, ToolContext
from mmd.tools.registry import Registry
from mmd.turn import budget, context
from mmd.turn.budget import Budget, Window
from mmd.turn.plan import TurnSetup
from mmd.turn.session import Session

from ..scripted_provider import ScriptedProvider, Step, answer, call, calls


class Dump(Tool):
    """A read tool that returns *size* bytes of numbered lines, as read_file does (no spill of its own)."""

    name = "dump"
    description = "Print a file."
    parameters = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "size": {"type": "integer"}},
        "required": ["name", "size"],
    }
    tier = "read"

    def echo(self, args: dict[str, Any]) -> str:
        return f"dump {args['name']}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(ok=True, content=text_of(args["name"], args["size"]))


def text_of(name: str, size: int) -> str:
    line = f"{name}: the quick brown fox jumps over the lazy dog\n"
    return (line * (size // len(line) + 1))[:size]


class Dense(Counter):
    """A tokenizer where every byte is a token: denser than any byte cap assumes."""

    async def _count(self, text: str) -> int | None:
        return len(text.encode())


class Host:
    def __init__(self, root: Path) -> None:
        self.store = Store.open(root / "state" / "mm.db")
        self.state_dir = root / "state"
        self.log_path = root / "state" / "mmd.log"


class Turns:
    """One session whose turns run with a budget of *window* tokens."""

    def __init__(self, root: Path) -> None:
        (root / "work").mkdir()
        self.host = Host(root)
        row = self.host.store.create_session(cwd=str(root / "work"), agent=None, model="test/scripted")
        self.session = Session(self.host, row)

    def setup(self, provider: ScriptedProvider, window: int, counter: Counter | None = None) -> TurnSetup:
        b = Budget(window=Window.of(window, 256), counter=counter or Counter())
        limits = Limits(max_bytes=b.window.output_bytes(30_000))
        return TurnSetup(
            provider=provider,
            model_name="test/scripted",
            system="You are a test.",
            registry=Registry([Dump()]),
            limits=limits,
            budget=b,
            max_steps=100,
        )

    async def run(self, *steps: Step, window: int = 2048, prompt: str = "go", **kw: Any) -> ScriptedProvider:
        provider = ScriptedProvider(*steps)
        self.session.start()
        await self.session.run_turn(prompt, self.setup(provider, window, **kw))
        return provider

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e.data for e in self.host.store.events_after(self.session.id) if e.kind == kind]

    def stored(self) -> list[Message]:
        return self.host.store.messages(self.session.id)


@pytest.fixture
async def turns(tmp_path: Path) -> AsyncIterator[Turns]:
    t = Turns(tmp_path)
    yield t
    t.host.store.close()


def request_tokens(messages: list[Message]) -> int:
    """A request's tokens as the estimate counts them, without the template's overheads."""
    return sum(estimate(m.content) + sum(estimate(c.arguments) for c in m.tool_calls) for m in messages)


def dump(name: str, size: int) -> Step:
    return call("dump", {"name": name, "size": size})


# --- one output --------------------------------------------------------------------------------


async def test_an_output_over_its_share_is_cut_for_the_model_and_the_store_and_kept_whole_in_a_file(
    turns: Turns,
) -> None:
    provider = await turns.run(dump("big", 50_000), answer("done"), window=2048)
    assert turns.events("turn_ended")[0]["status"] == "ok"
    [result] = turns.events("tool_result")
    share = Window.of(2048, 256).output_tokens
    assert result["data"]["cut_to_window"] is True
    spill = Path(result["data"]["output_file"])
    assert spill.read_text() == text_of("big", 50_000)  # the whole
    assert f"is in {spill} — read any range of it with read_file" in result["content"]
    assert estimate(result["content"]) <= share
    read = provider.requests[1].messages[-1].content
    stored = [m.content for m in turns.stored() if m.role == "tool"]
    assert read == result["content"] == stored[0]  # what the model read is what --continue sends


async def test_an_output_within_its_share_is_left_whole(turns: Turns) -> None:
    await turns.run(dump("small", 1000), answer("done"))
    [result] = turns.events("tool_result")
    assert result["content"] == text_of("small", 1000) and result["data"] is None


async def test_a_denser_output_than_the_byte_cap_assumes_is_cut_again_by_its_count(tmp_path: Path) -> None:
    b = Budget(window=Window.of(4096, 256), counter=Dense())
    whole = text_of("dense", 20_000)
    cut = await context.cap_output(ToolResult(ok=True, content=whole), b, Limits(), tmp_path / "out.log")
    assert len(cut.content.encode()) <= b.window.output_tokens  # a byte a token: within the share
    assert (tmp_path / "out.log").read_text() == whole


async def test_a_process_output_already_spilled_keeps_its_own_file(tmp_path: Path) -> None:
    spilled = tmp_path / "output-bash.log"
    spilled.write_text("the raw output of the process")
    data = {"output_file": str(spilled), "exit_code": 0}
    b = Budget(window=Window.of(2048, 256), counter=Counter())
    result = ToolResult(ok=True, content=text_of("bash", 9000), data=data)
    cut = await context.cap_output(result, b, Limits(), tmp_path / "other.log")
    assert f"is in {spilled} —" in cut.content and not (tmp_path / "other.log").exists()
    assert spilled.read_text() == "the raw output of the process"


# --- stubs ----------------------------------------------------------------------------------


async def test_old_outputs_become_stubs_naming_files_that_hold_them_whole(turns: Turns) -> None:
    steps = [dump(f"f{i}", 2800) for i in range(8)]
    provider = await turns.run(*steps, answer("done"), window=4096)
    assert turns.events("turn_ended")[0] == {"status": "ok", "text": "done", "error": None}
    assert not turns.events("context_compacted")
    stubbed = [s for e in turns.events("context_stubbed") for s in e["stubbed"]]
    assert stubbed, "the history outgrew 75% of the room: old outputs must have become stubs"
    tools = [m for m in turns.stored() if m.role == "tool"]
    for record in stubbed:
        [message] = [m for m in tools if m.tool_call_id == record["call_id"]]
        assert message.content == budget.stub_text("dump", record["call_id"], 2800, record["file"])
        number = int(record["call_id"].removeprefix("call_")) - 1
        assert Path(record["file"]).read_text() == text_of(f"f{number}", 2800)
    assert tools[-1].content == text_of("f7", 2800)  # the newest output stays whole
    room = Window.of(4096, 256).room
    assert all(request_tokens(r.messages) <= room for r in provider.requests)


async def test_several_calls_of_one_step_that_print_more_than_the_window_holds_leave_the_newest_whole(
    turns: Turns,
) -> None:
    step = calls(*(("dump", {"name": f"p{i}", "size": 50_000}) for i in range(4)))
    provider = await turns.run(step, answer("done"), window=2048)
    assert turns.events("turn_ended")[0]["status"] == "ok"
    [stubbed] = turns.events("context_stubbed")
    assert [s["call_id"] for s in stubbed["stubbed"]][:1] == ["call_1"]
    last = provider.requests[1].messages
    assert "p3: the quick brown fox" in last[-1].content and not last[-1].content.startswith("[output of")
    assert request_tokens(last) <= Window.of(2048, 256).room


async def test_a_long_session_never_sends_a_request_over_the_window(turns: Turns) -> None:
    # Thirty steps, each reading a file larger than the whole window.
    steps = [dump(f"file{i:02}", 60_000) for i in range(30)]
    provider = await turns.run(*steps, answer("read them all"), window=4096)
    assert turns.events("turn_ended")[0] == {"status": "ok", "text": "read them all", "error": None}
    room = Window.of(4096, 256).room
    peak = max(request_tokens(r.messages) for r in provider.requests)
    assert peak <= room
    assert turns.events("context_stubbed")


# --- summaries --------------------------------------------------------------------------------

# A prompt that brings four earlier turns over 75% of a 2,048-token window's room.
LAST = "and now? " + "more " * 240


async def long_turns(turns: Turns) -> None:
    """Four turns of 200-token prompts: under 75% of the room each, until the fifth prompt comes."""
    for n in range(4):
        await turns.run(answer(f"answer {n}"), prompt=f"request {n}: " + "word " * 160, window=2048)
    assert not turns.events("context_compacted") and not turns.events("context_stubbed")


async def test_when_stubs_are_not_enough_the_older_turns_are_summarised_by_the_model(turns: Turns) -> None:
    await long_turns(turns)  # prompts are never stubbed
    summary = "The user sent four long requests; each was answered."
    provider = await turns.run(answer(summary), answer("fine"), prompt=LAST, window=2048)
    [compacted] = turns.events("context_compacted")
    assert compacted["by"] == "auto" and compacted["summary"] == "model" and compacted["summarised"] > 0
    assert compacted["after"] < compacted["before"]
    asked, final = provider.requests
    assert asked.tools == [] and "request 0" in asked.messages[-1].content  # the transcript
    stored = turns.stored()
    assert stored[0].role == "user" and stored[0].content.startswith(budget.NOTE_PREFIX)
    assert summary in stored[0].content
    assert [m.content for m in stored[-2:]] == [LAST, "fine"]
    assert final.messages[1:] == stored[:-1]  # the model read the note, then the new prompt


async def test_a_model_that_gives_no_summary_gets_one_written_by_mm(turns: Turns) -> None:
    await long_turns(turns)
    await turns.run(answer("{}"), answer("fine"), prompt=LAST, window=2048)
    [compacted] = turns.events("context_compacted")
    assert compacted["summary"] == "mm"
    assert "The user asked: request 0" in turns.stored()[0].content


async def test_a_request_that_cannot_fit_is_never_sent_and_the_turn_says_what_to_do(turns: Turns) -> None:
    provider = await turns.run(answer("never"), prompt="x " * 5000, window=1024)
    [ended] = turns.events("turn_ended")
    assert ended["status"] == "error"
    assert "context window of 1,024 tokens" in ended["error"] and "--model" in ended["error"]
    assert provider.requests == []


async def test_compact_summarises_the_whole_conversation_into_one_note(turns: Turns) -> None:
    await turns.run(dump("a", 3000), answer("a read"), window=8192)
    provider = ScriptedProvider(answer("The user had file a read."))
    setup = turns.setup(provider, 8192)
    done = await context.compact(turns.session, setup)
    assert done["by"] == "user" and done["summarised"] == 4 and done["summary"] == "model"
    assert done["after"] < done["before"] and done["window"] == 8192
    [note] = turns.stored()
    assert note.role == "user" and "The user had file a read." in note.content
    assert "current request" not in note.content  # asked between turns: nothing is pending
    assert turns.session.messages == [note]
    assert turns.events("context_compacted") == [done]
    transcript = provider.requests[0].messages[-1].content
    assert json.dumps({"name": "a", "size": 3000}) in transcript


async def test_compact_of_an_empty_session_does_nothing(turns: Turns) -> None:
    done = await context.compact(turns.session, turns.setup(ScriptedProvider(), 8192))
    assert done["summarised"] == 0 and done["summary"] == "none"
    assert turns.stored() == []


async def test_each_message_is_counted_once_however_many_steps_measure_it(turns: Turns) -> None:
    asked: list[str] = []

    class Counting(Counter):
        async def count(self, text: str) -> int:
            asked.append(text)
            return await super().count(text)

    steps = [dump(f"f{i}", 100) for i in range(20)]
    await turns.run(*steps, answer("done"), window=32_768, counter=Counting())
    assert turns.events("turn_ended")[0]["status"] == "ok" and not turns.events("context_compacted")
    messages = len(turns.stored())
    assert messages == 42  # the prompt, 20 calls and their results, the answer
    # Each step measures the whole history; a message is counted when it is new, not at every step
    # (which asked over 700 times). Besides each message once: each call's arguments and each output's
    # cap once, the system prompt and the tool block once a step.
    assert len(asked) <= messages + 20 + 20 + 2 * 21, len(asked)


def test_a_turns_system_message_is_one_object_while_the_prompt_is_the_same() -> None:
    setup = TurnSetup(provider=ScriptedProvider(), model_name="m", system="be brief", registry=Registry())
    history = [Message(role="user", content="hi")]
    one, two = setup.request_messages(history), setup.request_messages(history)
    assert one[0] is two[0] and one[0].content == "be brief" and one[1:] == history
    setup.system = "be briefer"
    three = setup.request_messages(history)
    assert three[0].content == "be briefer" and three[0] is not one[0]


def _specs(description: str) -> list[ToolSpec]:
    return [ToolSpec(name="look", description=description, parameters={"type": "object", "properties": {}})]


def test_the_tools_json_of_the_same_specs_is_written_once_and_another_specs_anew():
    specs = _specs("the first")
    text = context.tools_json(specs)
    assert json.loads(text) == [
        {
            "type": "function",
            "function": {"name": "look", "description": "the first", "parameters": specs[0].parameters},
        }
    ]
    assert context.tools_json(list(specs)) is text  # the next prompt's list of the same specs: kept
    assert "the second" in context.tools_json(_specs("the second"))  # the same name, another spec
    with pytest.raises(AttributeError):  # a kept spec is shared by every prompt: it cannot change
        specs[0].description = "changed"  # type: ignore[misc]


def test_the_tools_json_is_never_another_specs_whose_identity_was_reused():
    # Each entry holds its specs: a spec freed and another made at its address is not taken for it.
    for n in range(3 * context.TOOLS_JSON_KEPT):
        assert f"number {n}" in context.tools_json(_specs(f"number {n}"))


async def test_outputs_whose_whole_cannot_be_kept_are_cut_and_stubbed_all_the_same(turns: Turns) -> None:
    # The session's folder cannot be made (a file stands where it would be; a full disk does the same, see
    # tests/unit/procs/test_spill.py): the turn goes on, each cut output and each stub says the whole was
    # not kept and why, and no request passes the window.
    (turns.host.state_dir / "sessions").mkdir(parents=True)
    (turns.host.state_dir / "sessions" / turns.session.id).write_text("")
    steps = [dump(f"f{i}", 2800) for i in range(8)]
    provider = await turns.run(dump("big", 50_000), *steps, answer("done"), window=4096)
    assert turns.events("turn_ended")[0] == {"status": "ok", "text": "done", "error": None}
    big = turns.events("tool_result")[0]
    assert "the whole output was not kept (file exists)" in big["content"]
    assert "output_file" not in big["data"] and big["data"]["cut_to_window"] is True
    stubbed = [s for e in turns.events("context_stubbed") for s in e["stubbed"]]
    assert stubbed and all(s["file"] is None for s in stubbed)
    stubs = [
        m.content for m in turns.stored() if m.role == "tool" and m.content.startswith(budget.STUB_PREFIX)
    ]
    assert stubs and all("the whole was not kept (file exists)]" in s for s in stubs)
    room = Window.of(4096, 256).room
    assert all(request_tokens(r.messages) <= room for r in provider.requests)
