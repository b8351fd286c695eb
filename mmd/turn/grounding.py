"""Values a small model did not get from anywhere: a call of a declared or MCP tool is checked first.

Measured on contrib/eval with the 0.5B, the failures left after the grammar were calls whose values come
from nowhere in the conversation: after a right ``release 1.4.2 beta`` it went on with ``pkgtest parser`` —
"parser" is the example in the description — and it answered "the status of billing?" with ``status search``.
A value of a domain tool (a service, a package, a ticket) should come from the user or from a result the
model read. So for models whose server mm controls (``TurnSetup.ground_values``), each string argument of
a declared or MCP tool that reads like a name — one word, no spaces, not one of an enum's values — must
appear somewhere in what the user wrote or in a tool result of the session (case ignored). A call with a
value that does not is answered, not run, saying which value and where values come from. Built-in tools
are not checked: their paths, commands and patterns are the model's own to compose.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..models.base import Message

# Longer single words are taken as text the model composes (a message, a hash it was given whole).
_MAX_WORD = 80
# Punctuation around a word of a several-word value, not part of it ("(v2.0.1)," is "v2.0.1").
_EDGES = "\"'`()[]{}<>,;:!?."
# The most characters of the user's request a refusal quotes back.
QUOTE = 300


def ungrounded(args: dict[str, Any], schema: dict[str, Any], corpus: str) -> list[tuple[str, str]]:
    """(parameter, value) of each name-like string in *args* that *corpus* (lower-cased) never holds."""
    out: list[tuple[str, str]] = []
    props = schema.get("properties") if isinstance(schema, dict) else None
    for name, value in args.items():
        prop = props.get(name) if isinstance(props, dict) else None
        for word in _words(value, prop if isinstance(prop, dict) else {}):
            if word.lower() not in corpus:
                out.append((name, word))
    return out


def _words(value: Any, prop: dict[str, Any]) -> Iterable[str]:
    if "default" in prop and value == prop["default"]:
        return  # filled in by the contract, or the tool's own choice: not the model's invention
    if isinstance(value, str):
        if "enum" in prop or not value or len(value) > _MAX_WORD:
            return
        if not any(c.isspace() for c in value):
            yield value
        else:  # a short value of a few words: its words with a digit (a version, an id) are values too
            # (seen: the 0.5B ran `release {"version": "2.0.1 stable"}` for "the status of billing", the
            # skill's example version and a channel, which as a whole read like text and went unchecked)
            yield from (w for w in (w.strip(_EDGES) for w in value.split()) if any(c.isdigit() for c in w))
    elif isinstance(value, list):
        items = prop.get("items") if isinstance(prop.get("items"), dict) else {}
        for item in value:
            yield from _words(item, items)


def corpus(messages: list[Message], skip: tuple[str, ...] = ()) -> str:
    """What the user wrote and what tools answered in the session, lower-cased: where values may come from;
    the results of the tools named in *skip* left out.

    The turn's own calls add only results that really ran (mmd/turn/calls.py): an answer that quotes a
    refused value back must not make it a value the user gave."""
    heard = [
        m.content
        for m in messages
        if m.role == "user" or (m.role == "tool" and not _refusal(m) and m.name not in skip)
    ]
    return "\n".join(heard).lower()


def _refusal(message: Message) -> bool:
    """An answer of this module in an earlier turn: it quotes the refused value, which it must not ground."""
    return message.content.startswith(f"{message.name} was not run: ")


def answer(tool: str, missing: list[tuple[str, str]], request: str = "") -> str:
    """The refusal the model reads; it quotes the user's *request* back, where the values are to be found
    (the 0.5B repeated a refused ``checkout-service`` or ``OPS-4821`` when told only that it was wrong)."""
    values = ", ".join(f'{name} "{value}"' for name, value in missing)
    said = f" The user's request: {quote(request)}." if request.strip() else ""
    return f"{tool} was not run: {values} {NOWHERE}{said} {WHAT_NEXT}"


# The fixed sentences of the refusal (mmd/turn/answers.py knows them when a model repeats them as its answer).
NOWHERE = (
    "appears nowhere in the user's request or in any tool result, so it was not given to you (an example in "
    "a description is not a value to use)."
)
WHAT_NEXT = (
    "Call it again only with values the user gave, written as the user wrote them. If what the user asked "
    "for is already done, do not call anything: answer the user in plain words now."
)


def quote(request: str) -> str:
    """The user's request as a refusal quotes it: one line, at most QUOTE characters."""
    line = " ".join(request.split())
    return f"«{line if len(line) <= QUOTE else line[: QUOTE - 1] + '…'}»"
