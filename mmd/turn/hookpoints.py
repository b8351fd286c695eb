"""Where a turn runs the hooks of events other than a tool call, and what it does with their verdicts.

The tool events (PreToolUse, PostToolUse) run in the call's stages
(mmd/turn/calls.py). These run around them, as Claude Code runs them
(https://code.claude.com/docs/en/hooks#hook-events):

- ``SessionStart``: before the first prompt a session takes after it was
  started or resumed by a client (source ``startup`` or ``resume``); its
  context goes with that prompt;
- ``UserPromptSubmit``: before the prompt reaches the model; may block it (the
  turn ends ``denied``, the prompt is not kept) or add context to it;
- ``Stop``: when the model answers; a block makes it go on with the reason as
  the next user message, ``stop_hook_active`` true from then on in the turn,
  at most MAX_STOP_BLOCKS times a turn;
- ``Notification``: when a consent ask waits for a person;
- ``SessionEnd``: when the last client leaves a session whose SessionStart ran.

Policy (mmd/policy/hooks.py) returns what the hooks decided; this module
publishes their events and ends the turn (StopTurn) when one says so.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ..policy.hooks import EventOutcome, Hooks, Site, run_event_hooks
from ..rpc.methods import Event
from ..sandbox import Sandbox
from .calls import StopTurn
from .plan import TurnSetup

log = logging.getLogger(__name__)
# Blocks of Stop hooks in one turn after which the turn ends anyway (Claude Code's documented cap is 8).
MAX_STOP_BLOCKS = 8


class Hooked(Protocol):
    """What the hook points need of a session (mmd.turn.session.Session is one)."""

    id: str
    cwd: Any
    transcript: Any

    def emit(self, kind: str, data: dict[str, Any]) -> Event: ...


def _publish(session: Hooked, outcome: EventOutcome, *, may_stop: bool = True) -> None:
    for kind, data in outcome.events:
        session.emit(kind, data)
    if may_stop and outcome.stop is not None:
        raise StopTurn("denied", outcome.stop)


async def prompt_content(session: Hooked, setup: TurnSetup, prompt: str, *, start: str | None) -> str:
    """What the model reads of *prompt*: the prompt, then the contexts of the hooks.

    *start* is SessionStart's source (``startup``, ``resume``) when this is the
    session's first prompt since a client started or resumed it, else None.

    Errors: StopTurn("denied") when a UserPromptSubmit hook blocks the prompt
    or a hook answers ``continue: false``.
    """
    place, grace, contexts = (
        Site.for_turn(session, yolo=setup.yolo, sandbox=setup.sandbox),
        setup.limits.grace,
        [],
    )
    if start is not None:
        fields = {"source": start, "model": setup.model_name}
        out = await run_event_hooks(
            setup.hooks, "SessionStart", site=place, fields=fields, subject=(start,), grace=grace
        )
        _publish(session, out)
        contexts += out.context
    out = await run_event_hooks(
        setup.hooks, "UserPromptSubmit", site=place, fields={"prompt": prompt}, grace=grace
    )
    _publish(session, out)
    if out.blocked is not None:
        raise StopTurn("denied", f"A UserPromptSubmit hook blocked the prompt: {out.blocked}")
    return "\n\n".join([prompt, *contexts, *out.context])


async def stop_blocked(session: Hooked, setup: TurnSetup, answer: str, active: int) -> str | None:
    """Run the Stop hooks on the model's *answer*; the reason to go on when one blocks, else None.

    *active* is how many blocks came before in this turn (``stop_hook_active``
    when any). Past MAX_STOP_BLOCKS a block is refused with a warning.

    Errors: StopTurn when a hook answers ``continue: false``.
    """
    fields = {"stop_hook_active": active > 0, "last_assistant_message": answer}
    out = await run_event_hooks(
        setup.hooks,
        "Stop",
        site=Site.for_turn(session, yolo=setup.yolo, sandbox=setup.sandbox),
        fields=fields,
        grace=setup.limits.grace,
    )
    _publish(session, out)
    if out.blocked is not None and active >= MAX_STOP_BLOCKS:
        session.emit(
            "warning",
            {
                "message": f"Stop hooks blocked {active} times in this turn; the turn ends (check stop_hook_active)"
            },
        )
        return None
    return out.blocked


def _guarded(fn: Any) -> Any:
    """For hooks run in the daemon's nursery: a failure is logged, never raised into the daemon."""

    async def run(*args: Any) -> None:
        try:
            await fn(*args)
        except Exception:
            log.exception("%s hooks failed", fn.__name__)

    run.__name__ = fn.__name__
    return run


async def notify(
    session: Hooked,
    hooks: Hooks | None,
    yolo: bool,
    grace: float,
    message: str,
    sandbox: Sandbox | None = None,
) -> None:
    """Run the Notification hooks: a consent ask waits (``permission_prompt``). Never stops the turn."""
    fields = {"message": message, "title": "Permission needed", "notification_type": "permission_prompt"}
    out = await run_event_hooks(
        hooks,
        "Notification",
        site=Site.for_turn(session, yolo=yolo, sandbox=sandbox),
        fields=fields,
        subject=("permission_prompt",),
        grace=grace,
    )
    _publish(session, out, may_stop=False)


async def session_end(
    session: Hooked,
    hooks: Hooks | None,
    yolo: bool,
    grace: float,
    reason: str,
    sandbox: Sandbox | None = None,
) -> None:
    """Run the SessionEnd hooks (they cannot block); their events are published."""
    out = await run_event_hooks(
        hooks,
        "SessionEnd",
        site=Site.for_turn(session, yolo=yolo, sandbox=sandbox),
        fields={"reason": reason},
        subject=(reason,),
        grace=grace,
    )
    _publish(session, out, may_stop=False)


# What the session hands the daemon's nursery.
notify_guarded = _guarded(notify)
session_end_guarded = _guarded(session_end)
