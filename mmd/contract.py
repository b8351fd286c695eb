"""The typed contract every tool call goes through, whatever the tool's kind.

A call arrives as the model wrote it: a tool name and a JSON text.
:func:`parse_arguments` turns the text into a dict, :func:`validate` checks it
against the tool's JSON Schema, and :func:`answer` turns any :class:`ToolError`
into the text the model reads. :func:`render_schema` and
:func:`render_description` make what the model reads of a tool before calling it.

Rules (from shared/seeds/): refuse rather than guess. A value is converted only
when nothing is lost or guessed: ``"3"`` → 3, ``"true"`` → true, the integer 3 →
``"3"``. ``"yes"``, ``"three"``, 3.5 for an integer, an out-of-range number or a
value outside the enum is refused, never clamped. Every problem of a call is
reported at once (one round trip instead of one per field); the error's
``field`` and ``code`` are those of the first problem.

It also declares what a call ends in: :class:`ToolResult`, or a
:class:`ToolError` the model reads (mmd.tools.base re-exports both with the
Tool base class). A leaf: it imports only mmd.untrusted and mmd.patterns, so the
agent-file checks (mmd/config) validate examples and defaults with it.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from typing import Any, Literal, Protocol

import msgspec

from mmd import patterns
from mmd.untrusted import (
    MAX_ARGUMENTS_BYTES,
    MAX_DEPTH,
    DuplicateKey,
    TooDeep,
    TooLarge,
    check_json,
    no_duplicate_keys,
)

# Error classes of the seeds: what the model should do next.
ErrorClass = Literal["fix_and_retry", "retry_after", "terminal"]


class ToolResult(msgspec.Struct, kw_only=True, omit_defaults=True):
    ok: bool
    content: str  # the text the model reads
    data: dict[str, Any] | None = None  # machine-readable fields (error, exit code, spill file)


class ToolError(Exception):
    """An answered failure: the model gets ``reason`` and ``fix``, and the turn goes on."""

    def __init__(
        self,
        code: str,
        reason: str,
        *,
        cls: ErrorClass = "fix_and_retry",
        field: str | None = None,
        fix: str | None = None,
        example: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.cls = cls
        self.field = field
        self.fix = fix
        self.example = example

    def fields(self) -> dict[str, Any]:
        err: dict[str, Any] = {
            "code": self.code,
            "field": self.field,
            "reason": self.reason,
            "class": self.cls,
        }
        if self.fix:
            err["fix"] = self.fix
        if self.example is not None:
            err["example"] = self.example
        return {"ok": False, "error": err}


# Text of a JSON number, and of a JSON integer: a quoted number is accepted
# only when unquoting it gives exactly that JSON value.
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
# Keywords moved into the parameter descriptions by render_schema.
_MOVED = ("enum", "pattern", "minimum", "maximum", "minLength", "maxLength", "default")
# The longest call quoted back whole; a longer one is cut in its middle.
_MAX_QUOTE = 600
# What a value of each JSON type is called in an answer to the model (mmd/mcp/schema.py uses it too).
ARTICLE = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}
_EFFECTS = {
    "read": "Read-only: changes nothing.",
    "write": "Changes files or state.",
    "destructive": "Destructive: cannot be undone.",
}
_CLOSING = "Give each parameter as its own field."


class Problem(msgspec.Struct, frozen=True):
    """One thing wrong with a call's arguments."""

    code: str
    field: str | None
    reason: str  # one plain sentence (or two)
    fix: str


class FullCheck(Protocol):
    """A tool's own check of its whole schema, after the contract's (an MCP tool's: mmd/mcp/schema.py).

    ``search`` replaces Python's ``re`` for the schema's patterns (None: the
    pattern cannot be run here, so it is not checked); ``problems`` checks the
    converted arguments (None: the check could not finish).
    """

    def search(self, pattern: str, value: str) -> bool | None: ...

    def problems(self, args: dict[str, Any]) -> list[Problem] | None: ...


class InvalidArguments(ToolError):
    """The arguments broke the contract; the tool was not run.

    ``problems`` lists every problem found; ``code`` and ``field`` are the first one's.
    """

    def __init__(self, problems: list[Problem], *, example: dict[str, Any] | None) -> None:
        first = problems[0]
        super().__init__(
            first.code,
            " ".join(p.reason for p in problems),
            field=first.field,
            fix=" ".join(dict.fromkeys(p.fix for p in problems)),
            example=example,
        )
        self.problems = problems


def closest(word: str, candidates: list[str], n: int = 1) -> list[str]:
    """The candidates nearest to *word* (case-insensitive), best first; maybe none."""
    import difflib  # on first use: 0.1 MiB and 0.6 ms of every daemon start, for a mistake's hint

    lowered = {c.lower(): c for c in candidates}
    return [lowered[m] for m in difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)]


# --- parsing ------------------------------------------------------------------


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


# Made once: json.loads with any option builds a decoder at every call, and every tool call parses.
_DECODER = json.JSONDecoder(object_pairs_hook=no_duplicate_keys, parse_constant=_refuse_constant)


def _loads(text: str) -> Any:
    # Checked before decoding: json.loads recurses once per level (mmd/untrusted.py).
    check_json(text, what="the arguments are", max_depth=MAX_DEPTH, max_bytes=MAX_ARGUMENTS_BYTES)
    if text.startswith("\ufeff"):  # what json.loads refuses before it decodes
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def _limit_problem(e: TooDeep | TooLarge, field: str | None) -> Problem:
    what = f"{field} is" if field else "The arguments are"
    if isinstance(e, TooDeep):
        reason = f"{what} nested too deep: {e.depth:,} levels; the limit is {e.limit}."
        fix = "Send a flatter object: one field per parameter, each value as simple as its type."
        return Problem("too_deep", field, reason, fix)
    reason = f"{what} too large: {e.size:,} bytes; the limit is {e.limit:,} bytes."
    fix = "Send less in one call: split the work into several smaller calls."
    return Problem("too_large", field, reason, fix)


def parse_arguments(raw: str, *, example: dict[str, Any] | None = None) -> dict[str, Any]:
    """Turn the model's arguments text into a dict.

    An empty text and ``null`` mean no arguments. A JSON string holding a JSON
    object (stringified JSON, which small models send) is unpacked once.

    Errors: :class:`InvalidArguments` with code ``malformed_json`` (saying where
    the text broke), ``duplicate_field``, ``not_an_object``, ``too_deep``
    (nested deeper than MAX_DEPTH, 64 levels) or ``too_large`` (more than
    MAX_ARGUMENTS_BYTES, 1 MiB): the last two are checked before decoding.
    """
    if not raw.strip():
        return {}
    try:
        value = _loads(raw)
        if isinstance(value, str) and value.lstrip().startswith("{"):
            value = _loads(value)
        # A lone surrogate escape like "\udd00" is not text (UnicodeEncodeError); it can only come from a
        # \u escape, or be in the text already (not ASCII): an arguments text of neither is not encoded.
        if "\\u" in raw or not raw.isascii():
            _compact(value).encode()
    except (TooDeep, TooLarge) as e:
        raise InvalidArguments([_limit_problem(e, None)], example=example) from None
    except DuplicateKey as e:
        reason = f"{e.key} is given twice; it is not clear which value is meant."
        problem = Problem("duplicate_field", e.key, reason, f"Give {e.key} once.")
        raise InvalidArguments([problem], example=example) from None
    except json.JSONDecodeError as e:
        raise InvalidArguments(
            [Problem("malformed_json", None, _where_broken(e), _one_object(example))], example=example
        ) from None
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end].encode("unicode_escape").decode()
        reason = f"The arguments hold {bad}, a lone surrogate escape that is not a character."
        fix = "Send the text itself, or a surrogate pair for a character outside the BMP."
        raise InvalidArguments([Problem("malformed_json", None, reason, fix)], example=example) from None
    except ValueError as e:  # NaN, Infinity
        reason = f"The arguments are not valid JSON: {e}."
        problem = Problem("malformed_json", None, reason, _one_object(example))
        raise InvalidArguments([problem], example=example) from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        reason = f"The arguments must be a JSON object with one field per parameter, not {_kind(value)}."
        raise InvalidArguments(
            [Problem("not_an_object", None, reason, _one_object(example))], example=example
        )
    return value


def _one_object(example: dict[str, Any] | None) -> str:
    """How to send arguments that are not one JSON object: made for that error only (arguments are parsed
    at every call, and nearly always are one)."""
    sample = _compact(example) if example else '{"name": "value"}'
    return f"Send the arguments as one JSON object, e.g. {sample}"


def _where_broken(e: json.JSONDecodeError) -> str:
    what = e.msg[0].lower() + e.msg[1:]
    if e.pos == 0:
        return f"The arguments are not valid JSON: {what} at the very start."
    before = e.doc[max(0, e.pos - 40) : e.pos]
    return f"The arguments are not valid JSON: {what} at character {e.pos + 1}, just after `{before}`."


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "a list"}.get(type(value), "something else")


# --- validation ---------------------------------------------------------------


def validate(
    schema: dict[str, Any],
    args: dict[str, Any],
    *,
    example: dict[str, Any] | Callable[[], dict[str, Any] | None] | None = None,
    full: FullCheck | None = None,
) -> dict[str, Any]:
    """Check *args* against *schema* and return them converted, defaults filled in.

    The JSON Schema subset: an object with ``properties``, ``required`` and
    ``additionalProperties`` (false when absent: an unknown field is refused and
    named, with a did-you-mean). Property types string, integer, number,
    boolean, array (items checked like properties) and object (passed through);
    ``enum``, ``pattern``, ``minimum``/``maximum``, ``minLength``/``maxLength``
    and ``default`` (fills a missing optional). Other keywords are ignored.

    Conversions, the only ones: a string holding exactly a JSON number for an
    integer or number (``"3"``, ``"-2"``, ``"2.5"``; ``"3.0"`` → 3 for an
    integer); ``"true"``/``"false"`` (lowercase) for a boolean; an integer for a
    string (its text is exact); a string holding a JSON list or object for an
    array or object; ``null`` for an optional parameter means it was not given.
    Refused: a fractional number for a string (JSON parsing already turned 1.10
    into 1.1, so the text meant is lost: the model is asked to quote it); a
    single string for an array (wrapping would hide several values packed in
    one string).

    ``pattern`` has JSON Schema's meaning: it is searched, so it matches
    anywhere unless anchored; ``$`` means the end of the value (Python's ``$``
    would also match before a final newline, letting "1.4.2\\n" through).

    Errors: :class:`InvalidArguments` listing every problem; codes ``unknown_field``, ``missing_required``,
    ``wrong_type``, ``not_in_enum``, ``pattern_mismatch``, ``pattern_timeout`` (mmd/patterns.py),
    ``out_of_range``, ``too_deep``/``too_large`` for a string that would unpack past the limits. A ``pattern``
    that :func:`schema_pattern` refuses raises ``re.error``. *full* (:class:`FullCheck`: an MCP tool's whole
    schema) runs the patterns, then checks the converted arguments; a field already answered is not said
    again. *example* words the fixes only: a function that makes it is called only when a problem is found.
    """
    samples = _Samples(example)
    props: dict[str, Any] = schema.get("properties", {})
    open_ended = schema.get("additionalProperties", False) is not False
    problems, out = _unknown_fields(args, props, open_ended)
    required, deadline = set(schema.get("required", ())), patterns.Deadline()  # one deadline for the call
    for name, prop in props.items():
        value = args.get(name)
        if value is None:
            if name in required:
                problems.append(_missing(name, prop, samples.of(name)))
            elif "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            continue
        problem, value = _check(name, prop, value, samples, full, deadline)
        if problem is None:
            out[name] = value
        else:
            problems.append(_packed_hint(problem, value, props, name))
    if full is not None:
        problems += _full_problems(full, args, out, problems)
    if problems:
        raise InvalidArguments(problems, example=samples.example())
    return out


class _Samples:
    """A call's example, made only when a problem's fix quotes it (most calls have none), and the value
    it shows for a parameter, as JSON (``"command": "<command>"``)."""

    __slots__ = ("_example", "_made")

    def __init__(self, example: dict[str, Any] | Callable[[], dict[str, Any] | None] | None) -> None:
        self._example, self._made = example, not callable(example)

    def example(self) -> dict[str, Any] | None:
        if not self._made:
            self._example, self._made = self._example(), True  # type: ignore[operator]
        return self._example  # type: ignore[return-value]

    def of(self, name: str) -> str | None:
        return _example_value(self.example(), name)


def _full_problems(
    full: FullCheck, args: dict[str, Any], out: dict[str, Any], known: list[Problem]
) -> list[Problem]:
    """The whole schema's problems with the arguments as converted, less those of fields already said."""
    given = {k: v for k, v in args.items() if v is not None}  # null: not given, as above
    found = full.problems({**given, **out}) or []
    said = {p.field for p in known}
    return [p for p in found if _top_field(p.field) not in said and p.field not in said]


def _top_field(field: str | None) -> str | None:
    return re.split(r"[.\[]", field, maxsplit=1)[0] if field else field


def _unknown_fields(
    args: dict[str, Any], props: dict[str, Any], open_ended: bool
) -> tuple[list[Problem], dict[str, Any]]:
    """A problem for each argument that is not a parameter, with a did-you-mean; or, when the
    schema is open-ended, those arguments kept as they are."""
    problems: list[Problem] = []
    kept: dict[str, Any] = {}
    for key, value in args.items():
        if key in props:
            continue
        if open_ended:
            kept[key] = value
            continue
        maybe = closest(key, list(props))
        reason = f"{key} is not a parameter." + (f" Did you mean {maybe[0]}?" if maybe else "")
        problems.append(Problem("unknown_field", key, reason, f"Use only these fields: {', '.join(props)}."))
    return problems, kept


def _example_value(example: dict[str, Any] | None, name: str) -> str | None:
    return _compact(example[name]) if example and name in example else None


def _missing(name: str, prop: dict[str, Any], sample: str | None) -> Problem:
    fix = f'Add "{name}": {sample}.' if sample else f"Add {name} ({_type_name(prop)})."
    return Problem("missing_required", name, f"{name} is required but missing.", fix)


def _check(
    name: str,
    prop: dict[str, Any],
    value: Any,
    samples: _Samples | None,
    full: FullCheck | None,
    deadline: patterns.Deadline,
) -> tuple[Problem | None, Any]:
    """Convert and check one value; return (problem, value). *samples* words the fixes (None: no example)."""
    kind = prop.get("type")
    try:
        converted = _CONVERT[kind](value) if kind in _CONVERT else value
    except (TooDeep, TooLarge) as e:  # a string holding JSON nested too deep to unpack
        return _limit_problem(e, name), value
    if converted is _NO:
        return _wrong_type(name, kind, value, samples.of(name) if samples else None), value
    value = converted
    if "enum" in prop and value not in prop["enum"]:
        allowed = [_plain(e) for e in prop["enum"]]
        maybe = closest(str(value), allowed)
        reason = f"{name} {_show(value)} is not one of {', '.join(allowed)}." + (
            f" Did you mean {maybe[0]}?" if maybe else ""
        )
        return Problem("not_in_enum", name, reason, f"Send {name} as one of: {', '.join(allowed)}."), value
    if isinstance(value, str):
        problem = _check_string(name, prop, value, samples, full, deadline)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        problem = _check_range(name, prop, value)
    elif isinstance(value, list) and isinstance(prop.get("items"), dict):
        problem, value = _check_items(name, prop["items"], value, full, deadline)
    else:
        problem = None
    return problem, value


def _check_string(
    name: str,
    prop: dict[str, Any],
    value: str,
    samples: _Samples | None,
    full: FullCheck | None,
    deadline: patterns.Deadline,
) -> Problem | None:
    pattern = prop.get("pattern")
    try:
        found = None if pattern is None else _search(pattern, value, full, deadline)
    except patterns.TooSlow as e:
        return _pattern_timeout(name, pattern, samples.of(name) if samples else None, e.seconds)
    if found is False:
        sample = samples.of(name) if samples else None
        fix = f"Send {name} like {sample}." if sample else f"Send {name} matching {pattern}."
        return Problem(
            "pattern_mismatch", name, f"{name} {_show(value)} does not match the pattern {pattern}.", fix
        )
    low, high = prop.get("minLength"), prop.get("maxLength")
    if (low is not None and len(value) < low) or (high is not None and len(value) > high):
        limits = _between(low, high, "character")
        reason = f"{name} is {len(value)} characters long; it must be {limits}."
        return Problem("out_of_range", name, reason, f"Send {name} with {limits}.")
    return None


def _check_range(name: str, prop: dict[str, Any], value: float) -> Problem | None:
    low, high = prop.get("minimum"), prop.get("maximum")
    if (low is not None and value < low) or (high is not None and value > high):
        limits = _between(low, high)
        reason = f"{name} {_show(value)} is out of range: it must be {limits}."
        return Problem("out_of_range", name, reason, f"Send a value {limits} for {name}.")
    return None


def _pattern_timeout(name: str, pattern: str, sample: str | None, seconds: float) -> Problem:
    reason = f"{name} could not be checked against the pattern {pattern} in time: the check was stopped after {seconds:g} s."
    fix = f"Send {name} like {sample}" if sample else f"Send a shorter {name}"
    return Problem(
        "pattern_timeout",
        name,
        reason,
        f"{fix}; if the check times out again, the tool's pattern is at fault: tell the user.",
    )


def _search(pattern: str, value: str, full: FullCheck | None, deadline: patterns.Deadline) -> bool | None:
    """Whether *pattern* is found in *value*: by the tool's own check when it has one (an MCP
    server's pattern never runs in Python's backtracking ``re``), else by mmd.patterns by *deadline*
    (TooSlow after it)."""
    if full is not None:
        return full.search(pattern, value)
    return schema_pattern(pattern).search(value, deadline)


def _check_items(
    name: str, items: dict[str, Any], value: list[Any], full: FullCheck | None, deadline: patterns.Deadline
) -> tuple[Problem | None, list[Any]]:
    out = []
    for i, item in enumerate(value):
        problem, item = _check(f"{name}[{i}]", items, item, None, full, deadline)
        if problem is not None:
            return Problem(problem.code, name, problem.reason, problem.fix), value
        out.append(item)
    return None, out


def _between(low: Any, high: Any, unit: str = "") -> str:
    """``from 1 to 8``, ``at least 1``, ``at most 8``; *unit* is pluralized after the last number."""
    last = high if high is not None else low
    unit = f" {unit}{'' if last == 1 else 's'}" if unit else ""
    if low is not None and high is not None:
        return f"from {low} to {high}{unit}"
    return f"at least {low}{unit}" if low is not None else f"at most {high}{unit}"


def _wrong_type(name: str, kind: str, value: Any, sample: str | None) -> Problem:
    want = ARTICLE[kind]
    if kind == "integer" and isinstance(value, int | float | str) and not isinstance(value, bool):
        reason = f"{name} must be a whole number; got {_show(value)}."
    elif kind == "string" and isinstance(value, float):
        reason = f"{name} must be a string; got the number {_show(value)}, whose exact text may be lost: put it in quotes."
    elif kind == "array" and isinstance(value, str):
        reason = f"{name} must be a list with one item per value; got the single string {_show(value)}."
    else:
        reason = f"{name} must be {want}; got {_show(value)}."
    return Problem(
        "wrong_type", name, reason, f"Send {name} as {want}" + (f", e.g. {sample}." if sample else ".")
    )


# The longest string a refused argument may be for the hint that it holds other parameters too.
PACKED_HINT_CHARS = 4096


def _packed_hint(problem: Problem, value: Any, props: dict[str, Any], name: str) -> Problem:
    """Say so when a refused string seems to carry other parameters too."""
    # A short string only: the packing this hint names is a small model's, and each property's search of a
    # long one cost its whole length (1 MiB × 2,000 properties of a server's schema: 44 s).
    if not isinstance(value, str) or len(value) > PACKED_HINT_CHARS:
        return problem
    others = [p for p in props if p != name and re.search(rf"\b{re.escape(p)}\b", value, re.IGNORECASE)]
    if not others:
        return problem
    reason = f"{problem.reason} It seems to hold other parameters too ({', '.join(others)})."
    return Problem(problem.code, problem.field, reason, f"{_CLOSING} {problem.fix}")


def schema_pattern(pattern: str) -> patterns.Pattern:
    """A JSON Schema ``pattern`` as :func:`validate` runs it: ``$`` is the end of the value; compiled
    within mmd.patterns' limits (cached there).

    Errors: re.error for an invalid pattern; patterns.TooComplex (an re.error) for one too complex.
    """
    return patterns.compile(_dollar_is_end(pattern))


def _dollar_is_end(pattern: str) -> str:
    """Replace each bare ``$`` (not escaped, not in a class) by ``\\Z``."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        out.append(r"\Z" if c == "$" and not in_class else c)
        i += 1
    return "".join(out)


# Converters return _NO when the value cannot become the type without a guess.
_NO = object()


def _from_json_text(value: Any) -> Any:
    return _loads(value) if isinstance(value, str) and _JSON_NUMBER.fullmatch(value) else value


def _to_integer(value: Any) -> Any:
    value = _from_json_text(value)
    if isinstance(value, bool):
        return _NO
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else _NO


def _to_number(value: Any) -> Any:
    value = _from_json_text(value)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return value if ok else _NO


def _to_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    return {"true": True, "false": False}.get(value, _NO) if isinstance(value, str) else _NO


def _to_string(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else _NO


def _container(kind: type) -> Any:
    def convert(value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = _loads(value)
            except (TooDeep, TooLarge):
                raise
            except (ValueError, DuplicateKey):
                return _NO
        return value if isinstance(value, kind) else _NO

    return convert


_CONVERT = {
    "integer": _to_integer,
    "number": _to_number,
    "boolean": _to_boolean,
    "string": _to_string,
    "array": _container(list),
    "object": _container(dict),
}


# --- what the model reads -----------------------------------------------------


def answer(
    tool_name: str,
    raw_arguments: str,
    err: ToolError,
    *,
    schema: dict[str, Any] | None = None,
    example: dict[str, Any] | None = None,
) -> ToolResult:
    """The result the model reads for a call that failed with *err*.

    One plain sentence (or a few) on what was wrong, the call quoted back as it
    was sent (cut in the middle past 600 characters), the fix, and for invalid
    arguments what each parameter should be and the example. It ends with the
    machine-readable fields as one JSON line, also in ``ToolResult.data``
    (where, for several problems, ``error.problems`` lists each one).
    """
    invalid = isinstance(err, InvalidArguments)
    lines = [f"{tool_name} was not run. {err.reason}" if invalid else f"{tool_name} failed. {err.reason}"]
    lines.append(f"You sent: {tool_name}({_quote(raw_arguments)})")
    if err.fix:
        lines.append(f"Fix: {err.fix}")
    if err.cls == "terminal":
        lines.append("Sending the same call again will not help.")
    elif err.cls == "retry_after":
        lines.append("The same call may work later.")
    if invalid and schema is not None:
        required = set(schema.get("required", ()))
        lines.append("Parameters:")
        for name, prop in schema.get("properties", {}).items():
            lines.append(f"- {name} ({_type_name(prop)}): {_describe(prop, name in required)}".rstrip())
    shown = err.example if err.example is not None else example
    if invalid and shown is not None:
        lines.append(f"Example: {tool_name}({_compact(shown)})")
    data = err.fields()
    lines.append(json.dumps(data, ensure_ascii=False))
    if invalid and len(err.problems) > 1:  # in data only: the text already says each one
        data["error"]["problems"] = [msgspec.structs.asdict(p) for p in err.problems]
    return ToolResult(ok=False, content="\n".join(lines), data=data)


def shape_example(schema: dict[str, Any]) -> dict[str, Any]:
    """An example of a call's shape with no value that would act: each parameter as a placeholder.

    Shown instead of a write tool's realistic example when a call is invalid: a small model
    copies a ready-to-run example (``deploy production a1b2c3d``) as its next call; a
    placeholder such as ``"<commit matching ^[0-9a-f]{7,40}$>"`` fails the contract instead.
    """
    return {name: _shape(prop, name) for name, prop in schema.get("properties", {}).items()}


def _shape(prop: dict[str, Any], name: str = "value") -> Any:
    if "enum" in prop:
        return f"<one of: {', '.join(_plain(e) for e in prop['enum'])}>"
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items")
        return [_shape(items, name) if isinstance(items, dict) else "<value>"]
    if kind == "object" and isinstance(prop.get("properties"), dict):
        return shape_example(prop)
    return f"<{_shape_words(kind, prop, name)}>"


def _shape_words(kind: Any, prop: dict[str, Any], name: str) -> str:
    if kind == "string":
        return f"{name} matching {prop['pattern']}" if "pattern" in prop else name
    if kind in ("integer", "number"):
        word = "whole number" if kind == "integer" else "number"
        low, high = prop.get("minimum"), prop.get("maximum")
        return f"{word} from {low} to {high}" if low is not None and high is not None else word
    if kind == "boolean":
        return "true or false"
    return str(kind) if isinstance(kind, str) else "value"


def render_schema(schema: dict[str, Any], *, strict: bool = False) -> dict[str, Any]:
    """The schema the model reads.

    Each parameter's description gains what the model must know in words
    ("Required.", "Default: 4.", "One of: stable, beta.", the pattern, the
    range). Unless *strict*, the keywords said in words are removed (required,
    enum, pattern, minimum, maximum, minLength, maxLength, default,
    additionalProperties): a client that validates against them would end the
    turn instead of letting mm answer. *strict* keeps every keyword, for
    providers that constrain decoding to the schema.
    """
    required = set(schema.get("required", ()))
    props = {}
    for name, prop in schema.get("properties", {}).items():
        out = copy.deepcopy(prop)
        text = _describe(prop, name in required)
        if not strict:
            _strip(out)
            if isinstance(out.get("items"), dict):
                _strip(out["items"])
        out.pop("description", None)
        if text:
            out["description"] = text
        props[name] = out
    rendered: dict[str, Any] = {"type": "object", "properties": props}
    if strict:
        rendered["required"] = [n for n in props if n in required]
        rendered["additionalProperties"] = schema.get("additionalProperties", False)
    return rendered


def render_description(
    purpose: str,
    *,
    effects: str | None = None,
    prerequisite: str | None = None,
    example: dict[str, Any] | None = None,
) -> str:
    """A tool's description as the model reads it.

    *effects* is a tier (read, write, destructive) or a sentence;
    *prerequisite* a tool to call first or a sentence. Ends with "Give each
    parameter as its own field.", which was measured to stop small models
    packing every value into one field.
    """
    parts = [_sentence(purpose)]
    if effects:
        parts.append(_EFFECTS.get(effects) or _sentence(effects))
    if prerequisite:
        simple = re.fullmatch(r"[\w.-]+", prerequisite)
        parts.append(f"Call {prerequisite} first." if simple else _sentence(prerequisite))
    if example is not None:
        parts.append(f"Example: {_compact(example)}.")
    parts.append(_CLOSING)
    return " ".join(parts)


def _describe(prop: dict[str, Any], required: bool) -> str:
    parts = [_sentence(prop["description"])] if prop.get("description") else []
    if required:
        parts.append("Required.")
    elif "default" in prop:
        parts.append(f"Default: {_plain(prop['default'])}.")
    else:
        parts.append("Optional.")
    parts += _facts(prop)
    items = prop.get("items")
    if isinstance(items, dict) and _facts(items):
        parts.append("Each item: " + " ".join(_facts(items)))
    return " ".join(parts)


def _facts(prop: dict[str, Any]) -> list[str]:
    facts = []
    if "enum" in prop:
        facts.append(f"One of: {', '.join(_plain(e) for e in prop['enum'])}.")
    if "minimum" in prop or "maximum" in prop:
        facts.append(_capital(_between(prop.get("minimum"), prop.get("maximum"))) + ".")
    if "minLength" in prop or "maxLength" in prop:
        facts.append(_capital(_between(prop.get("minLength"), prop.get("maxLength"), "character")) + ".")
    if "pattern" in prop:  # last, with no full stop: it would read as part of the regex
        facts.append(f"Pattern: {prop['pattern']}")
    return facts


def _strip(prop: dict[str, Any]) -> None:
    for key in _MOVED:
        prop.pop(key, None)


def _type_name(prop: dict[str, Any]) -> str:
    kind = prop.get("type", "any")
    items = prop.get("items")
    if kind == "array" and isinstance(items, dict) and "type" in items:
        return f"array of {items['type']}s"
    return kind


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _plain(value: Any) -> str:
    return value if isinstance(value, str) and value else _compact(value)


def _compact(value: Any) -> str:
    return _COMPACT.encode(value)


# Made once: json.dumps with any option builds an encoder each time (calls that cost more than most
# small documents' encoding, several times a tool call). Same texts as json.dumps with these options.
_COMPACT = json.JSONEncoder(ensure_ascii=False)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical(value: Any) -> str:
    """*value* as one canonical JSON text (keys sorted, no spaces, UTF-8 kept): same values, same text."""
    return _CANONICAL.encode(value)


def _show(value: Any) -> str:
    text = _compact(value)
    return text if len(text) <= 80 else text[:77] + "…"


def _quote(raw: str) -> str:
    if len(raw) <= _MAX_QUOTE:
        return raw
    cut = len(raw) - _MAX_QUOTE
    return f"{raw[:400]}…[{cut} characters cut]…{raw[-200:]}"
