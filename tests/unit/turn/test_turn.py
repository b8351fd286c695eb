"""A turn in process: mmd.turn's session and loop against the scripted provider, no daemon, no HTTP.

Each test builds a real :class:`~mmd.turn.session.Session` on a real store in its tmp_path,
gives it a :class:`~mmd.turn.plan.TurnSetup` whose provider is tests/unit/scripted_provider.py
and whose tools are small in-process tools defined here, runs one turn and reads what the
turn committed (events and messages) and what the model was sent. Where time matters
(retries, a model that thinks for an hour, idle sessions) the test uses ``autojump_clock``.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from mmd import contract
from mmd.contract import ToolResult
from mmd.models.base import Message, Timings
from mmd.rpc.methods import ConsentAnswer
from mmd.store import Store
from mmd.tools.base import Tool, ToolContext
from mmd.tools.registry import Registry
from mmd.turn.loop import MAX_STEP_CALLS
from mmd.turn.plan import TurnSetup
from mmd.turn.session import Session

from ..scripted_provider import ScriptedProvider, Step, answer, call, calls

TABLE = {"a": "1", "b": "2", "c": "3"}


class Lookup(Tool):
    """A read tool: the value of a key."""

    name = "lookup"
    description = "The value of a key."
    parameters = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    tier = "read"

    def __init__(self) -> None:
        self.ran: list[str] = []

    def echo(self, args: dict[str, Any]) -> str:
        return f"lookup {args['key']}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.ran.append(args["key"])
        key = args["key"]
        if key not in TABLE:
            return ToolResult(
                ok=False, content=f"no key {key}", data={"ok": False, "error": {"code": "not_found"}}
            )
        return ToolResult(ok=True, content=f"{key} is {TABLE[key]}")


class Store_(Tool):
    """A write tool: it needs a person's consent (or --yolo)."""

    name = "put"
    description = "Set a key."
    parameters = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    tier = "write"

    def __init__(self) -> None:
        self.ran: list[str] = []

    def echo(self, args: dict[str, Any]) -> str:
        return f"put {args['key']}"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.ran.append(args["key"])
        return ToolResult(ok=True, content=f"{args['key']} set")


class Stuck(Tool):
    """A read tool that never ends until cancelled."""

    name = "wait"
    description = "Wait forever."
    parameters = {"type": "object", "properties": {}}
    tier = "read"

    def echo(self, args: dict[str, Any]) -> str:
        return "wait"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


class Host:
    def __init__(self, root: Path) -> None:
        self.store = Store.open(root / "state" / "mm.db")
        self.state_dir = root / "state"
        self.log_path = root / "state" / "mmd.log"


class Client:
    """An attached client: it is sent the session's events, and may answer consent asks."""

    def __init__(self, on_event: Callable[[Any], None] = lambda event: None) -> None:
        self.client = "test"
        self.peer_pid = 4242
        self.subscriptions: dict[str, bool] = {}
        self.events: list[Any] = []
        self.on_event = on_event

    def notify(self, method: str, params: Any) -> None:
        assert method == "event"
        self.events.append(params)
        self.on_event(params)

    def notify_each(self, method: str, each: list[Any]) -> None:
        for params in each:
            self.notify(method, params)


class Turn:
    """One session and what its turns need: the store, the tools, the provider."""

    def __init__(self, root: Path) -> None:
        (root / "work").mkdir()
        self.host = Host(root)
        row = self.host.store.create_session(cwd=str(root / "work"), agent=None, model="test/scripted")
        self.session = Session(self.host, row)
        self.lookup, self.put, self.stuck = Lookup(), Store_(), Stuck()

    def setup(self, provider: ScriptedProvider, **kw: Any) -> TurnSetup:
        registry = Registry([self.lookup, self.put, self.stuck])
        return TurnSetup(
            provider=provider, model_name=provider.name, system="You are a test.", registry=registry, **kw
        )

    async def run(self, *steps: Step, prompt: str = "go", **kw: Any) -> ScriptedProvider:
        provider = ScriptedProvider(*steps)
        self.session.start()  # as the daemon does before it starts the turn's task
        await self.session.run_turn(prompt, self.setup(provider, **kw))
        return provider

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [e.data for e in self.host.store.events_after(self.session.id) if kind in (None, e.kind)]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.host.store.events_after(self.session.id)]

    def ended(self) -> dict[str, Any]:
        [end] = self.events("turn_ended")
        return end


@pytest.fixture
async def turn(tmp_path: Path) -> AsyncIterator[Turn]:
    t = Turn(tmp_path)  # in the test's trio run: a session reads trio's clock
    yield t
    t.host.store.close()


def tool_messages(messages: list[Message]) -> list[str]:
    return [m.content for m in messages if m.role == "tool"]


# --- the loop: steps, calls, answers ---------------------------------------------------------


async def test_an_answer_without_calls_ends_the_turn_and_streams_its_text(turn: Turn) -> None:
    provider = await turn.run(answer("All done here.", chunks=3), prompt="hello", temperature=0.2)
    assert turn.ended() == {"status": "ok", "text": "All done here.", "error": None}
    assert "".join(e["text"] for e in turn.events("text")) == "All done here."
    assert len(turn.events("text")) == 3
    assert turn.kinds()[0] == "turn_started" and turn.kinds()[-1] == "turn_ended"
    [request] = provider.requests
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "You are a test."),
        ("user", "hello"),
    ]
    assert request.tools == ["lookup", "put", "wait"] and request.temperature == 0.2
    assert [m.role for m in turn.host.store.messages(turn.session.id)] == ["user", "assistant"]


async def test_a_call_runs_and_its_result_is_what_the_model_reads_next(turn: Turn) -> None:
    provider = await turn.run(call("lookup", {"key": "b"}), answer("b is 2."))
    assert turn.lookup.ran == ["b"]
    assert turn.ended()["status"] == "ok"
    last = provider.requests[1].messages[-1]
    assert (last.role, last.name, last.tool_call_id, last.content) == ("tool", "lookup", "call_1", "b is 2")
    [announced] = turn.events("tool_call")
    assert (announced["name"], announced["echo"], announced["tier"]) == ("lookup", "lookup b", "read")
    [result] = turn.events("tool_result")
    assert result["ok"] and result["call_id"] == "call_1"


async def test_a_calls_events_arrive_with_the_rows_written_beside_them_already_committed(turn: Turn) -> None:
    # One commit for a step's message and its assistant event, for a call's record and its tool_call event,
    # and for its tool_result event and its message: when a client is sent each event, another connection
    # already reads the rows written with it.
    other = sqlite3.connect(turn.host.store.path)
    rows = {
        "assistant": "SELECT count(*) FROM messages WHERE session_id = ? AND role = 'assistant'",
        "tool_call": "SELECT count(*) FROM tool_calls WHERE session_id = ?",
        "tool_result": "SELECT count(*) FROM messages WHERE session_id = ? AND role = 'tool'",
    }
    seen: list[tuple[str, int]] = []

    def on_event(event: Any) -> None:
        if event.kind in rows:
            seen.append((event.kind, other.execute(rows[event.kind], (turn.session.id,)).fetchone()[0]))

    turn.session.subscribe(Client(on_event), interactive=False)
    await turn.run(call("lookup", {"key": "b"}), call("lookup", {"key": "c"}), answer("done."))
    other.close()
    assert seen == [
        ("assistant", 1),
        ("tool_call", 1),
        ("tool_result", 1),
        ("assistant", 2),
        ("tool_call", 2),
        ("tool_result", 2),
        ("assistant", 3),
    ]


async def test_a_steps_message_and_its_first_calls_record_are_one_commit_sent_together(turn: Turn) -> None:
    # The step's commit holds its first call's contract stage too (loop._open_first): the assistant and
    # tool_call events arrive in one batch, as one commit's events; the result is a commit of its own.
    batches: list[list[str]] = []
    begun: list[int] = []  # transactions begun when each batch came

    class Batches(Client):
        def notify_each(self, method: str, each: list[Any]) -> None:
            batches.append([event.kind for event in each])
            begun.append(len(begins))

    begins: list[str] = []
    turn.host.store._conn.set_trace_callback(
        lambda sql: begins.append(sql) if sql.startswith("BEGIN") else None
    )
    turn.session.subscribe(Batches(), interactive=False)
    await turn.run(call("lookup", {"key": "b"}), call("lookup", {"key": "c"}), answer("done."))
    turn.host.store._conn.set_trace_callback(None)
    # The turn's start and end are a commit each too (with the session's title, and its time).
    steps = [["assistant", "tool_call"], ["tool_result"]] * 2 + [["assistant"]]
    assert batches == [["turn_started"], *steps, ["turn_ended"]]
    # The user's message is a commit of its own (after the prompt's hooks), then two commits a call.
    assert [b - a for a, b in itertools.pairwise(begun)] == [2, 1, 1, 1, 1, 1]


async def test_a_steps_first_call_has_its_arguments_parsed_once(
    turn: Turn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loop's key of the call and its contract stage share one parse (loops.parsed_key): the same
    # arguments, converted and checked as before; a second call of the step parses on its own.
    parsed: list[str] = []
    real = contract.parse_arguments

    def counted(raw: str, **kw: Any) -> dict[str, Any]:
        parsed.append(raw)
        return real(raw, **kw)

    monkeypatch.setattr(contract, "parse_arguments", counted)
    await turn.run(call("lookup", {"key": "b"}), answer("b is 2."))
    assert parsed == ['{"key": "b"}'] and turn.lookup.ran == ["b"]
    parsed.clear()
    await turn.run(calls(("lookup", {"key": "a"}), ("lookup", {"key": "b"})), answer("done"))
    assert parsed == ['{"key": "a"}', '{"key": "b"}', '{"key": "b"}'] and turn.lookup.ran == ["b", "a", "b"]


async def test_each_step_records_the_timings_its_server_reported(turn: Turn) -> None:
    timed = Timings(prompt_tokens=500, cached_tokens=400, prompt_ms=120.5, gen_tokens=20, gen_ms=800.0)
    await turn.run(call("lookup", {"key": "b"}, timings=timed), answer("b is 2."))
    first, second = turn.events("assistant")
    assert first["timings"] == {
        "prompt_tokens": 500,
        "cached_tokens": 400,
        "prompt_ms": 120.5,
        "gen_tokens": 20,
        "gen_ms": 800.0,
    }
    assert "timings" not in second  # a server that reports none (every one but llama-server)


async def test_several_calls_in_one_step_run_in_order(turn: Turn) -> None:
    await turn.run(calls(("lookup", {"key": "c"}), ("lookup", {"key": "a"})), answer("ok"))
    assert turn.lookup.ran == ["c", "a"]
    assert tool_messages(turn.session.messages) == ["c is 3", "a is 1"]


async def test_calls_past_a_steps_bound_are_left_out_and_the_model_told(turn: Turn) -> None:
    # 10,000 calls of one answer were 20,000 events to every client (one filled its queue and was dropped)
    # and 10,000 messages sent back with every later step. The first MAX_STEP_CALLS run; the rest are left
    # out of the step, the person warned and the model told once the others ran.
    many = [("lookup", {"key": f"k{n}"}) for n in range(MAX_STEP_CALLS + 500)]
    provider = await turn.run(calls(*many), answer("ok"))
    assert turn.lookup.ran == [f"k{n}" for n in range(MAX_STEP_CALLS)]
    [step] = [m for m in turn.session.messages if m.role == "assistant" and m.tool_calls]
    assert len(step.tool_calls) == MAX_STEP_CALLS
    note = (
        f"[mm] That step made {MAX_STEP_CALLS + 500} tool calls; a step may make {MAX_STEP_CALLS}. "
        f"The first {MAX_STEP_CALLS} ran; the other 500 were left out and did not run: make those you still "
        f"need in later steps, at most {MAX_STEP_CALLS} a step."
    )
    sent = provider.requests[1].messages
    assert len(tool_messages(sent)) == MAX_STEP_CALLS and (sent[-1].role, sent[-1].content) == ("user", note)
    assert turn.events("warning") == [{"message": note}]
    assert len(turn.events("tool_call")) == MAX_STEP_CALLS
    assert turn.ended()["status"] == "ok"


async def test_an_invalid_call_is_answered_with_the_call_quoted_back_and_never_runs(turn: Turn) -> None:
    provider = await turn.run(call("lookup", '{"kee": "a"'), call("lookup", {"key": "a"}), answer("a is 1."))
    assert turn.lookup.ran == ["a"]  # only the second, valid call ran
    answered = provider.requests[1].messages[-1].content
    assert '{"kee": "a"' in answered  # quoted back as the model wrote it
    assert turn.ended()["status"] == "ok"


async def test_a_pattern_that_backtracks_is_answered_as_an_invalid_call(turn: Turn) -> None:
    # The fuzzing report's t4: a declared tool's pattern and the model's value hung the daemon for good
    # in the contract's check, on the event loop. 2**40 ways to fail: it ends at the check's deadline.
    turn.lookup.parameters = {
        "type": "object",
        "properties": {"key": {"type": "string", "pattern": "^(a|a)+$"}},
        "required": ["key"],
    }
    provider = await turn.run(call("lookup", {"key": "a" * 40 + "!"}), answer("cannot."))
    assert turn.lookup.ran == []
    answered = provider.requests[1].messages[-1].content
    assert answered.startswith(
        "lookup was not run. key could not be checked against the pattern ^(a|a)+$ in time"
    )
    assert '"code": "pattern_timeout"' in answered
    assert turn.ended()["status"] == "ok"


async def test_an_unknown_tool_is_answered_with_the_closest_name(turn: Turn) -> None:
    provider = await turn.run(call("lokup", {"key": "a"}), answer("sorry"))
    assert 'Did you mean "lookup"?' in provider.requests[1].messages[-1].content


async def test_max_steps_stops_a_model_that_never_answers(turn: Turn) -> None:
    steps = [call("lookup", {"key": k}) for k in "abc"]
    provider = await turn.run(*steps, answer("never reached"), max_steps=3)
    end = turn.ended()
    assert end["status"] == "max_steps" and "max_steps" in end["text"]
    assert len(provider.requests) == 3 and turn.lookup.ran == ["a", "b", "c"]


async def test_a_failing_call_repeated_is_nudged_once_then_stops_the_turn(turn: Turn) -> None:
    missing = call("lookup", {"key": "zz"})
    provider = await turn.run(missing, missing, missing, answer("never reached"))
    assert turn.lookup.ran == ["zz", "zz"]  # the third never ran
    assert "Loop:" in provider.requests[2].messages[-1].content  # the second answer carries the nudge
    assert [e["action"] for e in turn.events("loop_detected")] == ["nudge", "stop"]
    assert turn.ended()["status"] == "loop"
    assert len(provider.requests) == 3
    # The person reads what the call kept getting (a refusal that asks something of them, say).
    [answered] = [line for line in turn.ended()["text"].splitlines() if line.startswith("The last ")]
    first = turn.events("tool_result")[-1]["content"].splitlines()[0]
    assert answered.startswith(f"The last lookup call was answered: {first[:100]}")


async def test_the_same_error_twice_in_a_row_is_nudged(turn: Turn) -> None:
    missing = call("lookup", {"key": "zz"})
    provider = await turn.run(missing, missing, answer("no such key"))
    assert "the same error (not_found)" in provider.requests[2].messages[-1].content
    assert [e["kind"] for e in turn.events("loop_detected")] == ["same_error"]


async def test_a_model_error_ends_the_turn_with_it(turn: Turn) -> None:
    await turn.run(
        call("lookup", {"key": "a"}), Step(error="test/scripted: overloaded; gave up after 4 attempts.")
    )
    end = turn.ended()
    assert end["status"] == "error" and "overloaded" in end["error"]
    assert not turn.session.running and turn.session.turn_done.is_set()


async def test_a_call_written_as_text_is_recovered_when_the_model_needs_it(turn: Turn) -> None:
    written = answer('<tool_call>\n{"name": "lookup", "arguments": {"key": "c"}}\n</tool_call>')
    await turn.run(written, answer("c is 3."), recover_tool_calls=True)
    assert turn.lookup.ran == ["c"]
    [recovered] = turn.events("recovered_tool_call")
    assert recovered["name"] == "lookup" and json.loads(recovered["arguments"]) == {"key": "c"}


# --- consent: a write tool asks a person, or stops the turn with nobody to ask -----------------


async def test_a_write_with_nobody_to_ask_is_denied_and_the_turn_stops(turn: Turn) -> None:
    await turn.run(call("put", {"key": "a"}), answer("never reached"))
    assert turn.put.ran == []
    end = turn.ended()
    assert end["status"] == "denied" and "no client that can answer is attached" in end["text"]
    # The history stays valid for the next turn: the call has its answer.
    assert tool_messages(turn.session.messages)[-1].startswith("Denied")


async def test_a_write_runs_once_an_attached_client_allows_it(turn: Turn) -> None:
    def allow(event: Any) -> None:
        if event.kind == "consent_needed":
            answer_ = ConsentAnswer(
                session_id=turn.session.id, request_id=event.data["request_id"], decision="allow_once"
            )
            turn.session.answer_consent(client, answer_)

    client = Client(allow)
    turn.session.subscribe(client, interactive=True)
    await turn.run(call("put", {"key": "a"}), answer("a set."))
    assert turn.put.ran == ["a"] and turn.ended()["status"] == "ok"
    [answered] = turn.events("consent_answered")
    assert answered["decision"] == "allow_once" and answered["by"] == "test (pid 4242)"
    assert [e.kind for e in client.events] == turn.kinds()  # the client saw every event, in order


async def test_yolo_lets_a_write_run_without_asking(turn: Turn) -> None:
    await turn.run(call("put", {"key": "b"}), answer("done"), yolo=True)
    assert turn.put.ran == ["b"] and turn.events("consent_needed") == []


# --- time: retries, cancellation, idleness (autojump_clock: virtual seconds, no real wait) --------


async def test_retries_are_waited_for_and_announced(
    turn: Turn, autojump_clock: trio.testing.MockClock
) -> None:
    start = trio.current_time()
    await turn.run(Step(text="finally", retries=[(30.0, "status 429"), (60.0, "status 503")]))
    assert trio.current_time() - start == pytest.approx(90.0)
    retries = turn.events("model_retry")
    assert [(e["attempt"], e["wait"], e["reason"]) for e in retries] == [
        (1, 30.0, "status 429"),
        (2, 60.0, "status 503"),
    ]
    assert turn.ended()["text"] == "finally"


async def test_cancelling_a_turn_while_the_model_thinks(
    turn: Turn, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn.run, Step(text="after an hour", delay=3600.0))
        await trio.sleep(10)
        assert turn.session.running
        assert turn.session.cancel()
    assert turn.ended() == {"status": "cancelled", "text": "", "error": None}
    assert trio.current_time() < 3600
    assert not turn.session.cancel()  # nothing runs any more


async def test_cancelling_a_turn_during_a_call_answers_the_call(
    turn: Turn, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn.run, call("wait"), answer("never reached"))
        await trio.sleep(5)
        turn.session.cancel()
    assert turn.ended()["status"] == "cancelled"
    # The call that was cut off has an answer, so the conversation stays valid for the model.
    assert tool_messages(turn.session.messages) == ["Not run: the turn was cancelled."]
    assert turn.session.messages[-2].tool_calls[0].name == "wait"


async def test_a_session_is_idle_only_without_a_turn_or_a_client(
    turn: Turn, autojump_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(turn.run, Step(text="slow", delay=120.0))
        await trio.sleep(60)
        assert turn.session.idle_for(trio.current_time()) == 0.0  # a turn is running
    await trio.sleep(600)
    assert turn.session.idle_for(trio.current_time()) == pytest.approx(600.0)
    client = Client()
    turn.session.subscribe(client, interactive=False)
    assert turn.session.idle_for(trio.current_time()) == 0.0  # a client is attached
    turn.session.unsubscribe(client)
    await trio.sleep(30)
    assert turn.session.idle_for(trio.current_time()) == pytest.approx(30.0)


async def test_what_is_written_together_is_sent_once_committed_and_kept_whole_or_not_at_all(
    turn: Turn,
) -> None:
    # A message and the event that shows it share one commit; the client is sent the event only once it
    # is committed (another connection reads it), and a block that fails leaves nothing anywhere.
    session, store = turn.session, turn.host.store
    other = sqlite3.connect(store.path)
    seen: list[tuple[str, int]] = []
    client = Client(lambda event: seen.append((event.kind, _committed(other, session.id))))
    session.subscribe(client, interactive=False)
    before = len(session.messages)
    with session.together():
        session.add_message(Message(role="assistant", content="a"))
        session.emit("assistant", {"text": "a"})
        session.emit("text", {"text": "a"})
        assert client.events == [] and _committed(other, session.id) == 0
    assert seen == [("assistant", 2), ("text", 2)]  # each sent after both were committed
    assert [m.content for m in session.messages[before:]] == ["a"]
    with pytest.raises(RuntimeError), session.together():
        session.add_message(Message(role="assistant", content="lost"))
        session.emit("assistant", {"text": "lost"})
        raise RuntimeError("failed")
    assert len(client.events) == 2 and _committed(other, session.id) == 2
    assert [m.content for m in session.messages[before:]] == ["a"]
    assert [m.content for m in store.messages(session.id)][-1] == "a"
    other.close()


def _committed(db: sqlite3.Connection, session_id: str) -> int:
    return db.execute("SELECT count(*) FROM events WHERE session_id = ?", (session_id,)).fetchone()[0]


# --- an answer a person can use; no loop after success -------------------------------------------


async def test_a_reply_of_braces_is_asked_again_for_words(turn: Turn) -> None:
    provider = await turn.run(call("lookup", {"key": "a"}), answer("{}"), answer("The value of a is 1."))
    assert turn.ended() == {"status": "ok", "text": "The value of a is 1.", "error": None}
    [event] = turn.events("unusable_answer")
    assert (event["text"], event["reason"], event["action"]) == ("{}", "only punctuation", "ask_again")
    asked = provider.requests[-1]
    assert asked.tools == []  # asked without tools: it can only answer
    assert "not an answer in words" in asked.messages[-1].content
    assert turn.session.messages[-1].content == "The value of a is 1."


async def test_when_the_model_still_gives_no_words_mm_says_what_ran(turn: Turn) -> None:
    await turn.run(call("lookup", {"key": "b"}), answer(""), answer('{"name": "lookup", "arguments": {}}'))
    end = turn.ended()
    assert end["status"] == "ok"
    assert (
        end["text"]
        == "The model gave no answer in words. What ran in this turn and succeeded:\n- lookup: b is 2"
    )
    assert [e["action"] for e in turn.events("unusable_answer")] == ["ask_again", "summarised"]


async def test_no_words_and_nothing_succeeded_is_not_ok(turn: Turn) -> None:
    await turn.run(call("lookup", {"key": "zz"}), answer("}"), answer("  "))
    end = turn.ended()
    assert end["status"] == "no_answer" and "no call of this turn succeeded" in end["text"]


async def test_a_reply_that_says_it_called_a_tool_when_none_ran_is_told_and_the_next_step_is_the_call(
    turn: Turn,
) -> None:
    claim = 'I called the lookup tool with {"key": "a"}. The value is 7.'
    provider = await turn.run(answer(claim), call("lookup", {"key": "a"}), answer("The value of a is 1."))
    assert turn.ended() == {"status": "ok", "text": "The value of a is 1.", "error": None}
    [event] = turn.events("unusable_answer")
    assert event["action"] == "ask_for_call" and event["tool"] == "lookup"
    told = provider.requests[1]
    assert told.lead == "call" and told.messages[-1].content.startswith(
        "You wrote that you called lookup, but"
    )
    assert tool_messages(turn.session.messages) == ["a is 1"]  # the call it claimed now ran


async def test_a_claimed_call_is_told_once_then_is_no_answer(turn: Turn) -> None:
    claim = "I ran the lookup tool and the value is 7."
    provider = await turn.run(answer(claim), answer(claim), answer("I used lookup: it says 7."))
    end = turn.ended()
    assert end["status"] == "no_answer"  # nothing ran: no sentence to write, and no made-up result passed on
    assert [e["action"] for e in turn.events("unusable_answer")] == ["ask_for_call", "ask_again", "none"]
    asked = provider.requests[-1]
    assert asked.tools == [] and "no tool has run in this turn" in asked.messages[-1].content


async def test_an_empty_first_reply_is_told_and_the_step_taken_again_with_the_tools(turn: Turn) -> None:
    provider = await turn.run(answer(""), call("lookup", {"key": "a"}), answer("a is 1."))
    assert turn.ended()["text"] == "a is 1."
    [event] = turn.events("unusable_answer")
    assert (event["reason"], event["action"]) == ("empty", "ask_again_with_tools")
    again = provider.requests[1]
    assert again.tools and again.lead == "free"  # the request may need a tool, or only words
    assert again.messages[-1].content.startswith("Your reply was empty.")
    assert tool_messages(turn.session.messages) == ["a is 1"]


async def test_an_empty_reply_after_a_call_ran_is_asked_for_words_as_before(turn: Turn) -> None:
    provider = await turn.run(call("lookup", {"key": "a"}), answer(""), answer("a is 1."))
    assert [e["action"] for e in turn.events("unusable_answer")] == ["ask_again"]
    assert provider.requests[-1].tools == []


async def test_a_claim_after_a_call_ran_or_about_an_earlier_turn_is_an_answer(turn: Turn) -> None:
    await turn.run(call("lookup", {"key": "a"}), answer("I called lookup: a is 1."))
    assert turn.ended()["text"] == "I called lookup: a is 1." and turn.events("unusable_answer") == []
    # The next turn asks how it knew: nothing runs, and the reply tells what the earlier call did.
    await turn.run(answer("I used lookup with the key a."), prompt="How do you know?")
    assert turn.events("turn_ended")[-1]["text"] == "I used lookup with the key a."
    assert turn.events("unusable_answer") == []
    # A request that names the tool is one to act on: the same claim there is told.
    await turn.run(
        answer("I used lookup with the key a."), call("lookup", {"key": "a"}), answer("1."), prompt="lookup a"
    )
    assert [e["action"] for e in turn.events("unusable_answer")] == ["ask_for_call"]


@pytest.mark.parametrize(("before", "kept"), [("Looking it up.\n", True), ("x" * 40_000 + "\n", False)])
async def test_a_call_read_from_the_text_keeps_the_text_as_written_unless_it_is_too_big(
    turn: Turn, before: str, kept: bool
) -> None:
    written = before + '```json\n{"name": "lookup", "arguments": {"key": "a"}}\n```'
    await turn.run(answer(written), answer("a is 1."), recover_tool_calls=True)
    [step] = [m for m in turn.session.messages if m.tool_calls]
    assert step.said == (written if kept else None) and step.tool_calls[0].name == "lookup"


async def test_json_that_is_no_call_is_an_answer(turn: Turn) -> None:
    await turn.run(answer('{"a": 1, "b": 2}'))
    assert turn.ended()["text"] == '{"a": 1, "b": 2}' and turn.events("unusable_answer") == []


async def test_a_call_repeated_after_it_succeeded_is_not_run_and_then_ends_the_turn_ok(turn: Turn) -> None:
    same = call("put", {"key": "a"})
    provider = await turn.run(same, same, same, answer("never reached"), yolo=True)
    assert turn.put.ran == ["a"]  # ran once
    assert "already succeeded" in provider.requests[2].messages[-1].content
    end = turn.ended()
    assert end == {"status": "ok", "text": "put succeeded:\na set", "error": None}
    assert [(e["kind"], e["action"]) for e in turn.events("loop_detected")] == [
        ("after_success", "nudge"),
        ("after_success", "stop"),
    ]
    # Every call has its answer: the history stays valid for the next turn.
    assert len(tool_messages(turn.session.messages)) == 3


async def test_a_call_that_succeeded_sent_again_with_its_result_as_arguments_is_a_repeat(turn: Turn) -> None:
    """Seen with the 0.5B: after `backup {"database": "orders"}` it sent the result's fields back as
    arguments, again and again. Fields the tool lacks whose names or values its result holds: a repeat."""
    provider = await turn.run(
        call("put", {"key": "a"}),
        call("put", {"key": "a", "color": "blue"}),  # not from the result: the contract answers it
        call("put", {"key": "b", "status": "set"}),  # another key: not the call that succeeded
        call("put", {"status": "a set"}),  # the key left out: a wrong call, not an echo (the contract's)
        call("put", {"key": "a", "status": "set"}),  # the result's "set" added to the same call: a repeat
        call("put", {"key": "a", "status": "set"}),
        answer("never reached"),
        yolo=True,
    )
    assert turn.put.ran == ["a"]
    answers = [r.messages[-1].content for r in provider.requests[2:6]]
    assert "color" in answers[0] and "already succeeded" not in answers[0]
    assert "already succeeded" not in answers[1]
    assert "already succeeded" not in answers[2] and "status" in answers[2]
    assert answers[3].startswith(
        "Not run again: this put call already succeeded in this turn, and the fields you added are from its "
        "result, not parameters (its result is above)."
    )
    assert turn.ended() == {"status": "ok", "text": "put succeeded:\na set", "error": None}
    assert [(e["kind"], e["action"]) for e in turn.events("loop_detected")][-2:] == [
        ("after_success", "nudge"),
        ("after_success", "stop"),
    ]


async def test_a_read_repeated_after_a_write_runs_again(turn: Turn) -> None:
    await turn.run(
        call("lookup", {"key": "a"}),
        call("put", {"key": "a"}),
        call("lookup", {"key": "a"}),
        answer("a is 1."),
        yolo=True,
    )
    assert turn.lookup.ran == ["a", "a"] and turn.events("loop_detected") == []


# --- a store that cannot be written ---------------------------------------------------------------


class Breaks(Tool):
    """A read tool after which the store fails as *how* leaves it: ``freeze`` refuses every write, as on a
    full disk (SQLITE_READONLY here); ``sever`` can neither be written nor read (its connection closed)."""

    description = "Break the store."
    parameters = {"type": "object", "properties": {}}
    tier = "read"

    def __init__(self, store: Store, how: str) -> None:
        self.store, self.name = store, how

    def echo(self, args: dict[str, Any]) -> str:
        return self.name

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if self.name == "freeze":
            self.store._conn.execute("PRAGMA query_only = ON")
        else:
            self.store._conn.close()
        return ToolResult(ok=True, content="broken")


async def test_a_store_that_cannot_be_written_ends_the_turn_saying_so_and_its_end_is_saved_later(
    turn: Turn,
) -> None:
    # Until 2026-12-05 the turn's end raised out of run_turn (its commit failed too), which ended the daemon
    # and every session in it; and the client was told of an internal error.
    store, session = turn.host.store, turn.session
    turn.lookup = Breaks(store, "freeze")  # type: ignore[assignment]
    client = Client()
    session.subscribe(client, interactive=False)
    await turn.run(call("freeze", {}), answer("never read"))  # returns: nothing raises out of a turn
    [ended] = [e for e in client.events if e.kind == "turn_ended"]
    assert ended.data["status"] == "error"
    assert ended.data["error"].startswith(
        f"the store {store.path} could not be written: its file system is read-only"
    )
    assert "then try again (what was saved before is kept)" in ended.data["error"]
    assert ended.seq == store.last_seq(session.id) + 1  # sent unsaved, with the number it will have
    assert not session.running and session.unsaved_end is not None
    assert session.idle_for(10**9) == 0  # kept loaded until its end is saved
    store._conn.execute("PRAGMA query_only = OFF")  # space was freed
    provider = await turn.run(answer("back"), prompt="again")  # start() saves the last end first
    events = store.events_after(session.id)
    ends = [e for e in events if e.kind == "turn_ended"]
    assert [(e.seq, e.data) for e in ends[:1]] == [(ended.seq, ended.data)]
    assert ends[1].data == {"status": "ok", "text": "back", "error": None}
    kinds = [e.kind for e in events]
    assert kinds.index("turn_ended") < kinds.index("turn_started", 1)  # saved before the next turn began
    # The call the failed commit left unanswered was answered, so the history the model reads is valid.
    [request] = provider.requests
    [assistant] = [m for m in request.messages if m.tool_calls]
    answers = {m.tool_call_id: m.content for m in request.messages if m.role == "tool"}
    [only] = assistant.tool_calls
    assert answers[only.id].startswith("No result: its result could not be saved, and it may have run")
    assert session.unsaved_end is None


async def test_a_turn_whose_start_cannot_be_saved_is_ended_to_its_clients_and_leaves_nothing_open(
    turn: Turn,
) -> None:
    # A session resumed on a full disk: its first write is the turn's start. That raised out of run_turn,
    # outside its try: the daemon's nursery, and every session in it, ended with it.
    store, session = turn.host.store, turn.session
    await turn.run(answer("first"))
    client = Client()
    session.subscribe(client, interactive=False)
    store._conn.execute("PRAGMA query_only = ON")
    before = store.last_seq(session.id)
    await turn.run(answer("never asked"), prompt="on a full disk")  # returns
    [ended] = client.events
    assert ended.kind == "turn_ended" and ended.seq == before + 1 and ended.data["status"] == "error"
    assert "could not be written" in ended.data["error"]
    assert not session.running and session.unsaved_end is None  # nothing began in the store to end
    store._conn.execute("PRAGMA query_only = OFF")
    await turn.run(answer("second"), prompt="again")
    kinds = [e.kind for e in store.events_after(session.id)]
    assert kinds.count("turn_started") == kinds.count("turn_ended") == 2
    assert [e["text"] for e in turn.events("turn_ended")] == ["first", "second"]


async def test_a_store_that_fails_reads_too_still_ends_the_turn_to_its_clients(turn: Turn) -> None:
    # Nothing of the store answers: the end is numbered after the last event the clients were sent, and the
    # error, not the disk's doing, is told as an internal one.
    session = turn.session
    turn.lookup = Breaks(turn.host.store, "sever")  # type: ignore[assignment]
    client = Client()
    session.subscribe(client, interactive=False)
    await turn.run(call("sever", {}), answer("never read"))  # returns
    *before, ended = client.events
    assert ended.kind == "turn_ended" and ended.seq == before[-1].seq + 1 == session.sent_seq + 1
    assert ended.data["status"] == "error" and ended.data["error"].startswith("internal error:")
    assert not session.running and session.unsaved_end is not None
