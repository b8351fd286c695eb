"""A session: its conversation, its subscribers, and the life cycle of its turns.

Every step of a turn is an event, committed to the store before it is sent,
so a client that reconnects (or a daemon that was killed) loses nothing that
was announced. The session knows its host only through :class:`Host` (the
store, the state folder, the log) and its clients only through
:class:`Subscriber`: it imports nothing of the server.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Protocol

import trio

from ..models.base import Message, ModelError
from ..policy.consent import Answer, Asks, Ledger, Pending
from ..rpc import RPCError
from ..rpc.methods import ConsentAnswer, Event
from ..store import SessionRow, Store
from ..store.db import Batch
from . import hookpoints, transcript
from .loop import StopTurn, run_steps
from .plan import TurnSetup

log = logging.getLogger(__name__)

# What a session is busy with while it runs (Session.doing): a turn, an undo (mmd/api/session.py) or a
# compaction (Daemon.compact); only a turn can be cancelled.
TURN, UNDO, COMPACTION = "a turn", "undoing steps", "compacting its conversation"

# The end of a turn a session was loaded with still open: its daemon died in it, or could not save its end.
INTERRUPTED = (
    "the daemon stopped before this turn ended (it was killed or crashed); calls it had not finished "
    "did not run to their end. Continue with mm --resume {id} -p ..."
)


class Host(Protocol):
    """What a session needs of the daemon that holds it."""

    store: Store
    state_dir: Path
    log_path: Path


class Subscriber(Protocol):
    """A client attached to sessions: it is sent their events."""

    client: str
    peer_pid: int
    subscriptions: dict[str, bool]

    def notify(self, method: str, params: Any) -> None: ...

    def notify_each(self, method: str, each: list[Any]) -> None:
        """One notification for each of *each*, in order, sent together."""


class Together:
    """The block of :meth:`Session.together` (a class, not a generator: it runs twice a tool call)."""

    __slots__ = ("_batch", "_count", "_held", "_session")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._held: list[Event] | None = None
        self._count = 0
        self._batch: Batch | None = None

    def __enter__(self) -> None:
        session = self._session
        if session._held is not None:  # joins the open one
            return
        self._held = session._held = []
        self._count = len(session.messages)
        self._batch = session.store.batch()
        self._batch.__enter__()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: Any) -> None:
        held, session = self._held, self._session
        if held is None or self._batch is None:
            return
        try:
            self._batch.__exit__(kind, value, tb)  # commits, or rolls back; a failed commit raises
        except BaseException:
            kind = BaseException
            raise
        finally:
            session._held = None
            if kind is not None:
                del session.messages[self._count :]
        if kind is None and held:
            for conn in list(session.subscribers):  # a commit's events in one write to each client
                conn.notify_each("event", held)
            session.sent_seq = held[-1].seq


class Session:
    def __init__(self, host: Host, row: SessionRow) -> None:
        self.store = host.store
        self.log_path = host.log_path
        self.row = row
        self.id = row.id
        self.cwd = Path(row.cwd)
        self.dir = host.state_dir / "sessions" / row.id
        # Attached clients, and whether each can answer consent asks.
        self.subscribers: dict[Subscriber, bool] = {}
        self.messages: list[Message] = self.store.messages(row.id)
        self.running = False
        # What the session is busy with while running: TURN, UNDO or COMPACTION (busy_error says it).
        self.doing = TURN
        self.turn_done = trio.Event()
        self.turn_done.set()
        self._scope: trio.CancelScope | None = None
        # A cancel came while the turn was being set up (its model, its MCP servers): it ends as it begins.
        self._cancel_early = False
        self.asks = Asks()
        self.ledger = Ledger(self.store, self.id, str(self.cwd))
        # The conversation as JSON lines, for hooks (transcript_path; mmd/turn/transcript.py).
        self.transcript = transcript.path_for(host.state_dir, row.id)
        self._transcript_fd: int | None = None  # held open while a turn runs
        self._held: list[Event] | None = None  # events emitted within together(), sent once committed
        self.sent_seq = 0  # the newest event sent to the clients
        # A turn's end the store could not keep (a full disk): sent, and saved by settle() before anything else.
        self.unsaved_end: dict[str, Any] | None = None
        # The setup of the last turn (its hooks), and whether SessionStart ran since a client came.
        self._setup: TurnSetup | None = None
        self.hooks_started = False
        self.sandbox_warned = False  # the warning that the kernel cannot enforce the sandbox was sent
        # Starts a task in the daemon's nursery (for SessionEnd hooks once the last client left).
        self._spawn = getattr(host, "spawn", None)
        # trio.current_time() when it last stopped being in use (a turn, a client), for unloading.
        self.idle_since = trio.current_time()
        self.close_open_calls("the daemon stopped before this call finished")
        if self.store.turn_left_open(row.id):  # no turn runs in a session being loaded: it was interrupted
            self.unsaved_end = {"status": "interrupted", "text": "", "error": INTERRUPTED.format(id=row.id)}

    # -- events and subscribers ------------------------------------------

    def emit(self, kind: str, data: dict[str, Any]) -> Event:
        """Commit an event, then send it to every subscriber (within :meth:`together`: once it commits)."""
        event = self.store.append_event(self.id, kind, data)
        if self._held is not None:
            self._held.append(event)
            return event
        for conn in list(self.subscribers):
            conn.notify("event", event)
        self.sent_seq = event.seq
        return event

    def _send_unsaved(self, kind: str, data: dict[str, Any]) -> None:
        """Send an event the store could not keep (a turn's end, on a full disk): its clients would wait for it
        forever. It takes the number the store gives it when it is saved (:meth:`settle`)."""
        try:
            seq = self.store.last_seq(self.id) + 1
        except Exception:  # the disk fails reads too
            seq = self.sent_seq + 1
        event = Event(session_id=self.id, seq=seq, ts=time.time(), kind=kind, data=data)
        for conn in list(self.subscribers):
            conn.notify("event", event)

    def together(self) -> Together:
        """The messages added and events emitted within (``with session.together():``) are committed in one
        transaction (Store.batch), and the events sent once it is: still committed before any client sees
        them, for one commit instead of one each. If the block raises, nothing of it is kept, in the store or
        in ``messages`` (the transcript keeps its lines), and nothing is sent. A block within a block joins it.
        The block must not await (Store.batch says why)."""
        return Together(self)

    def subscribe(self, conn: Subscriber, *, interactive: bool) -> None:
        self.subscribers[conn] = interactive or self.subscribers.get(conn, False)
        conn.subscriptions[self.id] = self.subscribers[conn]

    def unsubscribe(self, conn: Subscriber) -> None:
        self.subscribers.pop(conn, None)
        conn.subscriptions.pop(self.id, None)
        if not self.can_ask():
            self.asks.deny_all()  # the last client that could answer went away
        if not self.subscribers:
            self.idle_since = trio.current_time()
            if not self.running:
                self._end_hooks()

    def idle_for(self, now: float) -> float:
        """Seconds this session has been unused (no turn, no client, no ask); 0 while in use.

        An idle session can be dropped from memory and loaded again from the
        store: everything it holds is there.
        """
        if self.running or self.subscribers or self.asks.pending or self.unsaved_end is not None:
            return 0.0  # (a turn's end the store could not keep is kept here until it can: settle)
        return max(0.0, now - self.idle_since)

    # -- consent asks: the policy asks, the attached clients answer ---------

    def can_ask(self) -> bool:
        return any(self.subscribers.values())

    async def ask(self, request: dict[str, Any], pending: Pending) -> Answer:
        """Announce a ``consent_needed`` ask and wait for a client's answer.

        Notification hooks run meanwhile in the daemon's nursery: a slow one never delays the answer.
        """
        setup = self._setup
        if (
            self._spawn is not None
            and setup is not None
            and setup.hooks
            and setup.hooks.matching("Notification")
        ):
            message = f"mm needs your permission to use {request.get('tool', 'a tool')}"
            self._spawn(
                hookpoints.notify_guarded,
                self,
                setup.hooks,
                setup.yolo,
                setup.limits.grace,
                message,
                setup.sandbox,
            )
        request_id, answer = await self.asks.wait(
            pending, lambda rid: self.emit("consent_needed", {"request_id": rid, **request})
        )
        self.emit(
            "consent_answered",
            {
                "request_id": request_id,
                "call_id": request["call_id"],
                "decision": answer.decision,
                "reason": answer.reason,
                "by": answer.origin,
            },
        )
        return answer

    def answer_consent(self, conn: Subscriber, answer: ConsentAnswer) -> None:
        self.asks.answer(answer, f"{conn.client} (pid {conn.peer_pid})")

    # -- the conversation --------------------------------------------------

    def add_message(self, msg: Message) -> None:
        self.store.append_message(self.id, msg)
        self.messages.append(msg)
        transcript.append(self.transcript, self.id, msg, self._transcript_fd)

    def replace_messages(self, messages: list[Message]) -> None:
        """The whole conversation replaced (stubs, a summary: mmd/turn/context.py), stored first."""
        self.store.replace_messages(self.id, messages)
        self.messages = list(messages)

    def close_open_calls(self, reason: str, *, lead: str = "Not run") -> None:
        """Answer tool calls left without a result (``lead: reason.``), so the history stays valid for the model."""
        for index in range(len(self.messages) - 1, -1, -1):
            msg = self.messages[index]
            if msg.role == "user":
                return
            if msg.role == "assistant":
                answered = {m.tool_call_id for m in self.messages[index + 1 :] if m.role == "tool"}
                for call in msg.tool_calls:
                    if call.id not in answered:
                        content = f"{lead}: {reason}."
                        self.add_message(
                            Message(role="tool", tool_call_id=call.id, name=call.name, content=content)
                        )
                return

    # -- turns ---------------------------------------------------------------

    def cancel(self) -> bool:
        """Cancel the running turn; its process groups are stopped before it ends. A turn still being set up
        (a local model loading, MCP servers starting: seconds) is cancelled as it begins, running nothing: a
        cancel then was lost, and the turn ran every call of it (a Ctrl-C in another client, daemon.stop).
        False when no turn runs (an undo or a compaction is not cancelled)."""
        if self._scope is not None:
            self._scope.cancel()
            return True
        if self.running and self.doing == TURN:
            self._cancel_early = True
            return True
        return False

    def start(self, doing: str = "") -> None:
        """A turn (or *doing*: UNDO, COMPACTION) begins: the end of the last turn is saved first, if it could
        not be.

        Errors: sqlite3.Error or OSError when that end cannot be saved still (Store.unwritable says why).
        """
        self.settle()
        self.running = True
        self.doing = doing or TURN
        self._cancel_early = False
        self.turn_done = trio.Event()

    def busy_error(self, then: str) -> RPCError:
        """The ``busy`` answer to a request that cannot run while the session does what it does: what that is,
        and *then*, what to do (a prompt during an undo was told to cancel a turn that did not exist)."""
        if self.doing == TURN:
            return RPCError(
                "busy",
                f"session {self.id} is running a turn; {then} once it ends, or cancel it (Ctrl-C in its client)",
            )
        return RPCError("busy", f"session {self.id} is busy {self.doing}; {then} once that is done")

    def settle(self) -> None:
        """Save the end of the last turn, sent without being saved when the store could not be written (a
        full disk), and the results its unanswered calls never got: the history is whole again before
        anything else is added to it."""
        if self.unsaved_end is None:
            return
        with self.together():
            # A call whose result could not be saved may have run: the model is told to look, not to repeat it.
            self.close_open_calls(
                "its result could not be saved, and it may have run: check what it did before running it again",
                lead="No result",
            )
            self.store.touch_session(self.id)
            self.emit("turn_ended", self.unsaved_end)
        self.unsaved_end = None

    def abort_start(self) -> None:
        """The turn could not be set up: the session is free again."""
        self.running = False
        self.idle_since = trio.current_time()
        self.turn_done.set()

    async def run_turn(self, prompt: str, setup: TurnSetup) -> None:
        """Run one turn to its end; never raises except on daemon shutdown.

        Cancellation: tool processes are stopped, unanswered calls get a
        "cancelled" result, and a ``turn_ended`` event with status
        ``cancelled`` is committed before this returns.
        """
        status, text, error = "cancelled", "", None
        try:
            self._begin(prompt, setup)
        except Exception as exc:  # its start could not be saved (a full disk): no turn began in the store
            self._send_unsaved(
                "turn_ended",
                {"status": "error", "text": "", "error": self._failure(exc, "the turn could not begin")},
            )
            self.abort_start()
            return
        try:
            with trio.CancelScope() as self._scope:
                if self._cancel_early:  # cancelled while set up: the prompt is kept, no hook or step runs
                    self._scope.cancel()
                    content = prompt
                else:
                    start = None if self.hooks_started else ("resume" if self.messages else "startup")
                    self.hooks_started = True
                    content = await hookpoints.prompt_content(self, setup, prompt, start=start)
                self.add_message(Message(role="user", content=content))
                status, text = await run_steps(self, setup)
        except StopTurn as stop:
            status, text = stop.status, stop.text
        except ModelError as exc:
            status, error = "error", str(exc)
        except Exception as exc:
            status, error = "error", self._failure(exc, "the turn failed")
        finally:
            self._end(status, text, error)

    def _failure(self, exc: Exception, what: str) -> str:
        """What a person is told of *exc*: what to do when the store could not be written (a full disk), else
        that it is a bug, whose trace goes to the log."""
        if (reason := self.store.unwritable(exc)) is not None:
            log.error("session %s: %s: %s (%r)", self.id, what, reason, exc)
            return reason
        log.exception("session %s: %s", self.id, what)
        return f"internal error: {exc!r}; details are in {self.log_path}"

    def _begin(self, prompt: str, setup: TurnSetup) -> None:
        started = {"prompt": prompt, "model": setup.model_name, "cwd": str(self.cwd)}
        title = None
        with self.together():  # the turn's start, its warnings and the session's title: one commit
            self.emit("turn_started", {**started, **_offered(setup)})
            for warning in setup.warnings:
                self.emit("warning", {"message": warning})
            if setup.sandbox is not None and setup.sandbox_missing is not None and not self.sandbox_warned:
                self.sandbox_warned = True  # said once per session; `mm daemon status` says it too
                self.emit("warning", {"message": sandbox_warning(setup.sandbox.mode, setup.sandbox_missing)})
            if not self.row.title:
                self.store.set_title(self.id, prompt)
                title = self.store.get_session(self.id).title
        if title is not None:  # once committed: a commit that failed leaves the row as the store has it
            self.row.title = title
        self._setup = setup
        self._transcript_fd = transcript.open_for_turn(self.transcript)  # the last step: _end closes it

    def _end(self, status: str, text: str, error: str | None) -> None:
        """End the turn: its unanswered calls answered, its ``turn_ended`` committed and sent. Never raises: a
        store that cannot be written (a full disk) must not take the daemon and every other session down
        with this one; the end is sent unsaved then, and saved by :meth:`settle`."""
        self._scope = None
        try:
            try:
                self.close_open_calls(
                    "the turn was cancelled" if status == "cancelled" else "the turn ended first"
                )
            finally:
                transcript.close(self._transcript_fd)
                self._transcript_fd = None
            with self.together():  # one commit
                self.store.touch_session(self.id)
                self.emit("turn_ended", {"status": status, "text": text, "error": error})
        except Exception as exc:
            reason = self._failure(exc, "the turn's end could not be saved")
            if not self._saved_end():  # else committed, and what failed came after it
                self.unsaved_end = {"status": "error", "text": text, "error": error or reason}
                self._send_unsaved("turn_ended", self.unsaved_end)
        finally:
            self.running = False
            self.idle_since = trio.current_time()
            self.turn_done.set()
        if not self.subscribers:
            self._end_hooks()

    def _saved_end(self) -> bool:
        try:
            return not self.store.turn_left_open(self.id)
        except Exception:  # the disk fails reads too: it was not saved
            return False

    def _end_hooks(self) -> None:
        """SessionEnd hooks, once the last client left a session whose SessionStart ran (in the daemon's
        nursery: the client is gone, nothing waits for them). The next prompt is a resume."""
        if not self.hooks_started:
            return
        setup, self.hooks_started = self._setup, False
        if self._spawn is None or setup is None or not (setup.hooks and setup.hooks.matching("SessionEnd")):
            return
        self._spawn(
            hookpoints.session_end_guarded,
            self,
            setup.hooks,
            setup.yolo,
            setup.limits.grace,
            "other",
            setup.sandbox,
        )


def _offered(setup: TurnSetup) -> dict[str, Any]:
    """What the turn offers the model, for a client's summary (``mm -p``'s stream-json init record)."""
    tools = list(setup.registry.tools.values())
    servers = sorted({t.source.removeprefix("mcp:") for t in tools if t.source.startswith("mcp:")})
    return {
        "tools": [t.name for t in tools],
        "skills": setup.skill_names(),
        "mcp_servers": servers,
        "yolo": setup.yolo,
        "sandbox": setup.sandbox.label if setup.sandbox else "off",
    }


def sandbox_warning(mode: str, missing: str) -> str:
    """The one warning of a session whose sandbox this kernel cannot enforce."""
    return (
        f"the sandbox ({mode}) cannot be enforced here: {missing}. Write tools that run a process "
        "(bash, declared tools) are refused; read tools and hooks run unconfined. To run them all "
        "unconfined, pass --sandbox off or write sandbox: off in the agent file."
    )
