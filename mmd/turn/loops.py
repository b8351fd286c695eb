"""The loop detector: a model that keeps making the same call is told so, then stopped.

Fed one record per tool call of a turn: the tool, its canonical arguments,
and the error code when the call failed. Three patterns count as a loop:

- ``repeat``: the same tool with the same canonical arguments N times in the
  turn (``loop.repeat``, default 3);
- ``same_error``: the same call failing with the same error N times in a row
  (``loop.same_error``, default 2): an unchanged retry fails again;
- ``cycle``: two (or three) calls alternating, A-B-A-B, the cycle seen N times
  in a row (``loop.cycle``, default 2).

Different arguments are never a loop: every pattern compares the tool and its
canonical arguments together. The first time a pattern is seen, the detector
returns a nudge, a text the turn loop appends to that call's result (the
model reads it right after its call; chat templates of small models accept no
system message mid-conversation). A call that belongs to a loop already
nudged ends the turn before it runs (:meth:`LoopDetector.before`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from .. import contract
from ..config.turns import LoopLimits
from ..tools.base import ToolError

# A call as the detector compares it: the tool and its canonical arguments.
Key = tuple[str, str]
# The longest arguments text quoted in a message.
_QUOTE = 200
# Cycle lengths looked for: A-B-A-B and A-B-C-A-B-C.
_PERIODS = (2, 3)


def call_key(name: str, raw_arguments: str) -> Key:
    """The tool and its arguments as canonical JSON; a text that does not parse is kept stripped."""
    return parsed_key(name, raw_arguments)[0]


def parsed_key(name: str, raw_arguments: str) -> tuple[Key, dict[str, Any] | None]:
    """:func:`call_key`, and the arguments as parsed (None when they do not parse), for the contract stage
    to take instead of parsing them again (CallRunner.open): the dict is only read by both."""
    try:
        args = contract.parse_arguments(raw_arguments)
    except ToolError:
        return (name, contract.canonical(raw_arguments.strip())), None
    return (name, contract.canonical(args)), args


class Loop(msgspec.Struct):
    """A loop found: which pattern, the calls in it, and what the model is told."""

    kind: str  # repeat | same_error | cycle
    keys: list[Key]
    count: int
    message: str

    def data(self, action: str) -> dict[str, Any]:
        return {
            "action": action,  # nudge | stop
            "kind": self.kind,
            "calls": [{"name": n, "arguments": a} for n, a in self.keys],
            "count": self.count,
            "message": self.message,
        }


class LoopDetector(msgspec.Struct):
    limits: LoopLimits = msgspec.field(default_factory=LoopLimits)
    history: list[tuple[Key, str | None]] = msgspec.field(default_factory=list)  # (call, error code)
    counts: dict[Key, int] = msgspec.field(default_factory=dict)
    nudged: dict[Key, Loop] = msgspec.field(default_factory=dict)  # every call of a nudged loop

    def before(self, key: Key) -> Loop | None:
        """The nudged loop this call continues, if any: the turn stops instead of running it."""
        if not self.limits.enabled:
            return None
        loop = self.nudged.get(key)
        if loop is None:
            return None
        name, args = key
        message = (
            f"Stopped: the model called {name} with {_quote(args)} again after being told it was "
            f"repeating itself ({loop.kind}). Rephrase the request, or continue with `mm --continue -p ...`."
        )
        return Loop(kind=loop.kind, keys=loop.keys, count=self.counts.get(key, 0) + 1, message=message)

    def after(self, key: Key, error: str | None) -> Loop | None:
        """Record a finished call; a newly found loop is returned once, with its nudge."""
        self.history.append((key, error))
        self.counts[key] = self.counts.get(key, 0) + 1
        if not self.limits.enabled:
            return None
        loop = self._same_error(key, error) or self._repeat(key) or self._cycle()
        if loop is not None:
            for k in loop.keys:
                self.nudged.setdefault(k, loop)
        return loop

    # -- patterns ----------------------------------------------------------------------

    def _repeat(self, key: Key) -> Loop | None:
        count = self.counts[key]
        if count < self.limits.repeat:
            return None
        name, args = key
        message = (
            f"Loop: you have called {name} with {_quote(args)} {count} times in this turn, with the same "
            "arguments each time. Calling it again will not give anything new. Use the result you already "
            "have, change the arguments, or answer the user now. If you call it once more unchanged, the "
            "turn ends."
        )
        return Loop("repeat", [key], count, message)

    def _same_error(self, key: Key, error: str | None) -> Loop | None:
        if error is None:
            return None
        run = 0
        for past_key, past_error in reversed(self.history):
            if past_key != key or past_error != error:
                break
            run += 1
        if run < self.limits.same_error:
            return None
        name, args = key
        message = (
            f"Loop: {name} with {_quote(args)} failed {run} times in a row with the same error "
            f"({error}). Sending it unchanged fails again. Read the error above and change what it "
            "names, or take another way. If you send this call once more unchanged, the turn ends."
        )
        return Loop("same_error", [key], run, message)

    def _cycle(self) -> Loop | None:
        # Only the last calls can close a cycle: the whole history, read at every call, grew with the turn.
        calls = [k for k, _ in self.history[-max(_PERIODS) * self.limits.cycle :]]
        for period in _PERIODS:
            need = period * self.limits.cycle
            if len(calls) < need:
                continue
            tail = calls[-need:]
            unit = tail[:period]
            if len(set(unit)) != period or tail != unit * self.limits.cycle:  # need is period * cycle
                continue
            names = " → ".join(f"{n}({_quote(a, 60)})" for n, a in unit)
            message = (
                f"Loop: you are going round in a circle of {period} calls ({names}), "
                f"{self.limits.cycle} times now, and nothing changes. Stop alternating: use what these "
                "calls returned, try something different, or answer the user. If you make one of these "
                "calls again unchanged, the turn ends."
            )
            return Loop("cycle", unit, self.limits.cycle, message)
        return None


def error_code(ok: bool, data: dict[str, Any] | None) -> str | None:
    """What a failed result's error is, for comparing one failure with the next; None for success."""
    if ok:
        return None
    data = data or {}
    err = data.get("error")
    if isinstance(err, dict) and err.get("code"):
        return str(err["code"])
    if "exit_code" in data:
        return f"exit_code {data['exit_code']}"
    if data.get("denied"):
        return "denied"
    return "failed"


def _quote(text: str, limit: int = _QUOTE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
