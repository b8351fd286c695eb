"""A GBNF grammar that makes a local model's tool call valid by construction.

llama-server constrains decoding to a grammar given with a request. This one
gates on the first character of the step: an answer in words (anything that
does not start like a call) is free text; a step that starts like a call — a
```json fence, a ``<tool_call>`` tag, a ``{`` — must be exactly one call of a
catalogued tool: the name one of the tools, the arguments an object of that
tool's schema (types, enums, required keys, arrays, nested objects, string
lengths, patterns the grammar can say; no unknown key), and generation ends
where the call ends, so a small model cannot repeat calls up to the token
limit.

Why a gate and not a *lazy* grammar triggered by a pattern: llama-server's
OpenAI endpoint overwrites ``grammar_lazy`` and ``grammar_triggers`` when a
request has no ``tools`` (tools/server/server-common.cpp copies the body's
fields only where it set none), so a lazy grammar sent there silently becomes
a strict one and every step is forced into a call — measured: the 0.5B then
called ``bash`` for "Reply with exactly one word: pong". The gate needs no
trigger and behaves the same on every build.

What the grammar cannot say — a numeric range, a pattern outside the subset
below — the contract still checks (mmd/contract.py) and answers.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import Lead, ToolSpec

# Characters of grammar one tool's arguments may take; a bigger schema gets "any object" (the contract checks).
_MAX_TOOL_GRAMMAR = 64 * 1024
# Optional keys said in every order they may start from; more are said as "any of them, in any order".
_MAX_ORDERED_OPTIONAL = 8

_BASE = r"""
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ("0" | [1-9] [0-9]{0,17})
number ::= integer ("." [0-9]{1,17})? ([eE] [-+]? [0-9]{1,3})?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" (string ": " value (", " string ": " value)*)? "}"
array ::= "[" (value (", " value)*)? "]"
prose ::= [^{`< \t\n] any* | not-fence | not-tag
any ::= [^\x00]
"""


def call_grammar(tools: list[ToolSpec], *, lead: Lead = "free") -> str:
    """The GBNF of one step: free text, or one call of one of *tools* in a fence, a tag or bare.

    *lead* ``"words"``: the step must start with at least a line of words, and only then may a call follow
    (the step after a success: a small model that would repeat the call it just made says what it has
    instead). ``"call"``: the step is exactly one call, no words (the first step after a chosen skill).
    The call's JSON is one line spaced as ``json.dumps`` spaces it, the form Qwen's template gives a past
    call: the 1.5B, left to choose, pretty-printed it over seven lines (28 tokens against 20).
    """
    rules: dict[str, str] = {}
    alternatives = []
    for index, tool in enumerate(tools):
        own: dict[str, str] = {}
        try:
            args = _value(tool.schema or tool.parameters, f"t{index}-args", own)
        except (TypeError, ValueError, AttributeError, RecursionError):
            args, own = (
                "object",
                {},
            )  # a schema of a shape no JSON Schema has: any object, the contract judges
        if sum(len(body) for body in own.values()) > _MAX_TOOL_GRAMMAR:
            args, own = "object", {}  # a schema too big to say (thousands of keys or enum values)
        rules.update(own)
        rules[f"t{index}"] = f'{_literal(tool.name)} ", \\"arguments\\": " {args}'
        alternatives.append(f"t{index}")
    rules["call"] = '"{\\"name\\": " (' + " | ".join(alternatives) + ') "}"'
    rules["block"] = '"```json\\n" call "\\n```" | "<tool_call>\\n" call "\\n</tool_call>" | call'
    if lead == "words":  # words first; what follows them is free (a call there is read by recovery)
        rules["root"] = "[ \\t\\n]* [^{`< \\t\\n] any*"
    elif lead == "call":
        rules["root"] = "[ \\t\\n]* block"
    else:
        rules["root"] = "[ \\t\\n]* (block | prose)?"
    rules["not-fence"] = _not_prefix("```json")
    rules["not-tag"] = _not_prefix("<tool_call>")
    lines = [f"{name} ::= {body}" for name, body in reversed(rules.items())]
    return "\n".join(lines) + "\n" + _BASE.strip() + "\n"


def _not_prefix(word: str) -> str:
    """Text that starts with *word*'s first character but is not *word* followed by a call."""
    alternatives = [
        f"{_literal_text(word[:i])} ([^{_code(ord(word[i]))}] any*)?" for i in range(1, len(word))
    ]
    return " | ".join(alternatives)


def choice_grammar(options: list[str]) -> str:
    """The GBNF of a step that is exactly one of *options* (a skill's name, or "none")."""
    return "root ::= " + " | ".join(_literal_text(o) for o in options) + "\n"


def _literal_text(text: str) -> str:
    """A GBNF literal matching *text* itself."""
    return json.dumps(text, ensure_ascii=False)


def _value(schema: Any, name: str, rules: dict[str, str]) -> str:
    """The rule for a value of *schema*, named *name* when it needs a rule of its own."""
    if not isinstance(schema, dict):
        return "value"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return "(" + " | ".join(_literal(v) for v in schema["enum"]) + ")"
    kind = schema.get("type")
    if kind == "object" and isinstance(schema.get("properties"), dict):
        rules[name] = _object(schema, name, rules)
        return name
    if kind == "array":
        item = _value(schema.get("items"), f"{name}-item", rules)
        rules[name] = f'"[" ({item} (", " {item})*)? "]"'
        return name
    if kind == "string":
        body = _string(schema)
        if body is None:
            return "string"
        rules[name] = body
        return name
    return {"integer": "integer", "number": "number", "boolean": "boolean"}.get(
        kind if isinstance(kind, str) else "", "value"
    )


def _string(schema: dict[str, Any]) -> str | None:
    """A rule body for a string with a pattern or a length, or None when plain ``string`` says all."""
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        inner = pattern_rule(pattern)
        if inner is not None:
            return f'"\\"" {inner} "\\""'
    low, high = schema.get("minLength"), schema.get("maxLength")
    low = low if isinstance(low, int) and not isinstance(low, bool) and 0 <= low <= 1000 else 0
    high = high if isinstance(high, int) and not isinstance(high, bool) and low <= high <= 1000 else None
    if low == 0 and high is None:
        return None
    return f'"\\"" char{{{low},{"" if high is None else high}}} "\\""'


def _object(schema: dict[str, Any], name: str, rules: dict[str, str]) -> str:
    """An object with exactly the schema's keys: required ones always, in order, then optional ones."""
    props: dict[str, Any] = schema["properties"]
    listed = schema.get("required")
    wanted = {k for k in listed if isinstance(k, str)} if isinstance(listed, list) else set()
    if wanted - set(props) or schema.get("additionalProperties", False) is not False:
        return "object"  # open: any keys
    required = [k for k in props if k in wanted]
    optional = [k for k in props if k not in required]
    member = {
        k: f'{_literal(k)} ": " {_value(v, f"{name}-{n}-{_slug(k)}", rules)}'
        for n, (k, v) in enumerate(props.items())
    }
    if len(optional) > _MAX_ORDERED_OPTIONAL:  # linear, not quadratic: any of them, in any order
        rules[f"{name}-opt"] = " | ".join(member[k] for k in optional)
        tail = f' (", " {name}-opt)*'
        head = ' ", " '.join(member[k] for k in required)
        body = f"{head}{tail}" if required else f"({name}-opt{tail})?"
        return f'"{{" {body} "}}"'
    if required:
        body = ' ", " '.join(member[k] for k in required)
        body += "".join(f' (", " {member[k]})?' for k in optional)
    elif optional:
        firsts = [
            member[k] + "".join(f' (", " {member[o]})?' for o in optional[i + 1 :])
            for i, k in enumerate(optional)
        ]
        body = "(" + " | ".join(f"({f})" for f in firsts) + ")?"
    else:
        body = ""
    return f'"{{" {body} "}}"' if body else '"{}"'


def _literal(value: Any) -> str:
    """A GBNF literal matching *value* written as JSON."""
    return json.dumps(json.dumps(value, ensure_ascii=False), ensure_ascii=False)


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower() or "x"


# -- patterns ---------------------------------------------------------------------------------------------

# What a pattern may use to be said in the grammar: anchors at both ends, literal characters, escapes of
# punctuation, \d \w \s, character classes, ".", groups with "|", and the quantifiers ? * + {n} {n,} {n,m}.
# Anything else (look-arounds, back-references, \b, lazy quantifiers) leaves the string unconstrained; the
# contract checks it after the call. What is said is never wider than JSON allows unescaped: no quote,
# backslash or control character (\s is a space), so a call the grammar lets through is valid JSON.
_LITERAL_ESCAPES = set(".-+*?()[]{}|^$/\\")
_CLASS_RANGES = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x20, 0x20)],
}
_MAX_COUNT = 100  # the largest {n,m} said; llama.cpp expands each repetition into rules (2,000 at most)


class _Unsupported(Exception):
    pass


def pattern_rule(pattern: str) -> str | None:
    """The GBNF of the characters of a JSON string matching *pattern* (anchored as a whole), or None.

    JSON Schema patterns match anywhere in the string, so only a pattern anchored at both ends of every
    branch says what the whole string is (``^a|b$`` is not: it is "starts with a, or ends with b").
    """
    if (
        len(pattern) > 200
        or not (pattern.startswith("^") and pattern.endswith("$"))
        or pattern.endswith("\\$")
    ):
        return None
    try:
        branches, end = _alternation(pattern, 1)
    except (_Unsupported, IndexError, ValueError):
        return None
    if end != len(pattern) - 1 or len(branches) != 1:
        return None
    return f"({branches[0][0]})"


# Each piece of a pattern is (GBNF text, whether it may match nothing, whether it holds a counted repeat).
_Piece = tuple[str, bool, bool]


def _alternation(p: str, i: int) -> tuple[list[_Piece], int]:
    branches = []
    while True:
        piece, i = _sequence(p, i)
        if not piece[0]:
            raise _Unsupported  # an empty branch: llama.cpp calls a repeat of it left recursion
        branches.append(piece)
        if i < len(p) and p[i] == "|":
            i += 1
            continue
        return branches, i


def _sequence(p: str, i: int) -> tuple[_Piece, int]:
    texts, nullable, counted = [], True, False
    while i < len(p) and p[i] not in "|)":
        if p[i] == "$" and i == len(p) - 1:
            break
        (text, empty, inner_count), i = _atom(p, i)
        quant, i = _quantifier(p, i)
        if quant and (empty or (quant.startswith("{") and inner_count)):
            raise _Unsupported  # a repeat of what may be empty, or a counted repeat of one
        texts.append(text + quant)
        nullable = nullable and (empty or quant in ("?", "*") or quant.startswith("{0"))
        counted = counted or inner_count or quant.startswith("{")
    return (" ".join(texts), nullable and bool(texts), counted), i


def _atom(p: str, i: int) -> tuple[_Piece, int]:
    c = p[i]
    if c == "(":
        i += 1
        if p.startswith("?:", i):
            i += 2
        elif p[i] == "?":
            raise _Unsupported  # look-arounds and named groups
        branches, i = _alternation(p, i)
        if p[i] != ")":
            raise _Unsupported
        text = " | ".join(b[0] for b in branches)
        return (f"({text})", any(b[1] for b in branches), any(b[2] for b in branches)), i + 1
    if c == "[":
        return (_class(p, i), False, False), p.index("]", i + 1) + 1
    if c == ".":
        return ("char", False, False), i + 1
    if c == "\\":
        e = p[i + 1]
        if e in _CLASS_RANGES:
            return (_render_class(_CLASS_RANGES[e], negated=False), False, False), i + 2
        if e in _LITERAL_ESCAPES:
            return (_literal_char(e), False, False), i + 2
        raise _Unsupported
    if c in "*+?{}^$]":
        raise _Unsupported
    return (_literal_char(c), False, False), i + 1


def _literal_char(c: str) -> str:
    if not _json_plain(ord(c), ord(c)):
        raise _Unsupported
    return f"[{_code(ord(c))}]"


def _json_plain(lo: int, hi: int) -> bool:
    """Whether every character from *lo* to *hi* stands in a JSON string unescaped."""
    return lo >= 0x20 and not (lo <= 0x22 <= hi) and not (lo <= 0x5C <= hi)


def _class(p: str, i: int) -> str:
    j = i + 1
    negated = p[j : j + 1] == "^"
    j += negated
    if p[j : j + 1] == "]":
        raise _Unsupported  # "[]a]": a GBNF class ends at its first "]"
    ranges: list[tuple[int, int]] = []
    while p[j] != "]":
        if p[j] == "\\" and p[j + 1] in _CLASS_RANGES:
            ranges += _CLASS_RANGES[p[j + 1]]
            j += 2
            continue
        lo, j = _class_char(p, j)
        hi = lo
        if p[j] == "-" and p[j + 1] != "]":
            hi, j = _class_char(p, j + 1)
            if hi < lo:
                raise _Unsupported
        ranges.append((lo, hi))
    if not negated and not all(_json_plain(lo, hi) for lo, hi in ranges):
        raise _Unsupported
    return _render_class(ranges, negated=negated)


def _class_char(p: str, j: int) -> tuple[int, int]:
    c = p[j]
    if c == "\\":
        if p[j + 1] not in _LITERAL_ESCAPES:
            raise _Unsupported
        return ord(p[j + 1]), j + 2
    if c == "[":
        raise _Unsupported
    return ord(c), j + 1


def _render_class(ranges: list[tuple[int, int]], *, negated: bool) -> str:
    parts = [_code(lo) if lo == hi else f"{_code(lo)}-{_code(hi)}" for lo, hi in ranges]
    if negated:  # nor what JSON must escape
        parts += [_code(0x22), _code(0x5C), f"{_code(0)}-{_code(0x1F)}"]
    return f"[{'^' if negated else ''}{''.join(parts)}]"


def _code(n: int) -> str:
    """A character in GBNF by its code point, so no character needs its own escape rule."""
    if n < 0x100:
        return f"\\x{n:02X}"
    return f"\\u{n:04X}" if n < 0x10000 else f"\\U{n:08X}"


def _quantifier(p: str, i: int) -> tuple[str, int]:
    if i >= len(p):
        return "", i
    c = p[i]
    if c in "?*+":
        if p[i + 1 : i + 2] in ("?", "+"):
            raise _Unsupported  # lazy and possessive quantifiers
        return c, i + 1
    if c == "{":
        m = re.match(r"\{(\d{1,3})(,(\d{0,3}))?\}", p[i:])
        if not m:
            raise _Unsupported
        low, comma, high = int(m.group(1)), m.group(2), m.group(3)
        if (comma and high and int(high) < low) or low > _MAX_COUNT or (high and int(high) > _MAX_COUNT):
            raise _Unsupported
        text = f"{{{low}}}" if not comma else f"{{{low},{high or ''}}}"
        return text, i + m.end()
    return "", i
