"""An MCP tool's whole inputSchema, checked with a real JSON Schema validator.

mm's contract (mmd/contract.py) checks a subset of JSON Schema on the top-level
fields and converts values losslessly (``"3"`` → 3). A server's schema says more:
nested ``required``, ``minItems``, ``oneOf``, ``exclusiveMinimum``, ``format``…
:class:`SchemaCheck` checks the converted arguments against all of it with
``jsonschema``, in the draft the schema declares (``$schema``; without one,
2020-12, the MCP specification's default since SEP-1613), and says each
problem as a contract :class:`~mmd.contract.Problem` with its JSON path, so
a call that breaks the server's schema is answered locally and never sent.

A server is not trusted, so neither is its schema:

- a schema larger than ``MAX_SCHEMA_BYTES`` (nesting is bounded before this,
  in tool.make_tools) is not used: the tool is left out with a warning;
- nothing is fetched: a ``$ref`` outside the schema does not resolve (the
  registry has no retriever), and that call is checked by the subset only;
- ``pattern`` and ``patternProperties`` run on RE2 (``google-re2``), whose
  time is linear in the text: a catastrophic pattern such as ``^(a+)+$``
  cannot stall the daemon. A pattern RE2 cannot compile (a backreference,
  a lookaround, a program past ``MAX_REGEX_MEMORY``) is not checked
  locally; the server still checks it;
- a schema with more than ``MAX_PATTERNS`` distinct patterns is not used:
  a few bytes of pattern text can cost MiBs in RE2, and patternProperties
  tries every one of them on each call, outside ``MAX_STEPS``;
- one check may evaluate at most ``MAX_STEPS`` keywords: a schema whose
  ``$ref``s multiply the work (or loop) stops there, and the call is then
  checked by the subset only. Deterministic: a count, not a clock.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Iterator
from typing import Any

from ..contract import ARTICLE, Problem, closest
from ..kept import Kept

log = logging.getLogger(__name__)

# Largest inputSchema used, in bytes of compact JSON (real ones are a few KiB).
MAX_SCHEMA_BYTES = 256 * 1024
# Keyword evaluations one check may make before it gives up (a real call needs a few hundred).
MAX_STEPS = 20_000
# Problems reported for one call at most (the first ones in the schema's order).
MAX_PROBLEMS = 20
# Distinct pattern/patternProperties regexes a schema may carry (real ones have a few). At most
# REGEXES_KEPT, so one call's patterns all stay compiled.
MAX_PATTERNS = 64
# Memory RE2 may use for one regex: its program, and the DFA it builds while matching (past it,
# matching goes on in RE2's slower NFA, still linear). The default, 8 MiB, is reached by a 14-byte
# pattern such as "[a-z]{1000}0"; real patterns need a few KiB. A larger program does not compile.
MAX_REGEX_MEMORY = 256 * 1024
# Regexes kept compiled in the whole process: google-re2's own cache (its module's LRU of 128) is the
# only one, so compiled patterns hold at most REGEXES_KEPT × MAX_REGEX_MEMORY = 32 MiB.
REGEXES_KEPT = 128
# RE2's work one call may take, as program size × characters searched, summed over the call's searches. A
# search past it is not made (left to the server, as a pattern RE2 cannot run): RE2's time is linear, but in
# both, and 64 patterns such as "[a-z]{1000}" over a 3,000-character key held the event loop for 2 s.
# RE2's slower matcher does ~50 M of these a second here: ≤ ~80 ms a call. Real patterns (a program of tens)
# over values of kilobytes use a few per cent of it. A count, not a clock, like MAX_STEPS.
MAX_MATCH_WORK = 4_000_000
# The MCP specification's dialect for a schema without $schema (SEP-1613).
DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Formats checked locally, where jsonschema can check them without optional packages: those
# whose check is a plain parse. Never "regex" (a hostile value would compile in Python's re).
FORMATS = ("email", "idn-email", "ipv4", "ipv6", "date", "uuid", "hostname")


class Unusable(Exception):
    """The server's schema cannot be used to check calls (why, in the message).

    ``too_large``: past MAX_SCHEMA_BYTES (the tool is then left out: the schema
    would also go to the model in every request).
    """

    def __init__(self, message: str, *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


class _OverBudget(Exception):
    pass


@functools.cache
def _re2() -> Any:
    import re2  # google-re2: linear-time matching, no backtracking

    options = re2.Options()
    options.log_errors = False  # a pattern RE2 refuses is expected, not an error to print
    options.max_mem = MAX_REGEX_MEMORY
    return re2, options


class Patterns:
    """A schema's patterns run on RE2; the whole check of a schema mm cannot use.

    Its ``problems`` is always None (not checked): the contract's subset alone
    answers, and still never runs a server's pattern in Python's ``re``.
    """

    def __init__(self) -> None:
        self.unchecked_patterns: set[str] = set()  # patterns RE2 cannot run: left to the server
        self._work = 0  # of MAX_MATCH_WORK, since the last call's problems()

    def problems(self, args: dict[str, Any]) -> list[Problem] | None:
        self._work = 0
        return None

    def search(self, pattern: str, value: str) -> bool | None:
        """Whether *pattern* (ECMA-262 flavour, unanchored) matches in *value*; None if RE2 cannot run it, or
        the call's searches reached MAX_MATCH_WORK (the contract searches a call's top-level patterns, then
        asks ``problems``, which ends the call's count)."""
        regex = self._compile(pattern)
        if regex is None:
            return None
        self._work += regex.programsize * (len(value) + 1)
        if self._work > MAX_MATCH_WORK:
            return None
        return regex.search(value) is not None

    def _compile(self, pattern: str) -> Any:
        # Not kept here: re2.compile keeps the last REGEXES_KEPT itself, for every check at once, where
        # a memo per check multiplied by the checks cached could hold GiBs.
        if pattern in self.unchecked_patterns:
            return None
        re2, options = _re2()
        try:
            return re2.compile(pattern, options)
        except re2.error:
            self.unchecked_patterns.add(pattern)
            return None


class SchemaCheck(Patterns):
    """The check of one tool's inputSchema; ``problems(args)`` after mm's own conversions.

    Errors (construction): :class:`Unusable` for a schema too large, not an
    object, invalid against its draft's meta-schema, or with more than
    MAX_PATTERNS distinct patterns.
    """

    def __init__(self, schema: Any) -> None:
        from jsonschema import FormatChecker, validators
        from referencing import Registry

        super().__init__()
        if not isinstance(schema, dict):
            raise Unusable("its inputSchema is not an object")
        size = len(json.dumps(schema, separators=(",", ":")))
        if size > MAX_SCHEMA_BYTES:
            raise Unusable(
                f"its inputSchema is {size:,} bytes; the limit is {MAX_SCHEMA_BYTES:,}", too_large=True
            )
        base = validators.validator_for(schema, default=validators.Draft202012Validator)
        self.dialect = str(schema.get("$schema", DEFAULT_DIALECT))
        meta_errors = base(base.META_SCHEMA).iter_errors(schema)
        bad = next(meta_errors, None)
        if bad is not None:
            where = _path(bad.absolute_path) or "the top"
            raise Unusable(f"its inputSchema is not valid JSON Schema at {where}: {_short(bad.message)}")
        count = len(_patterns(schema))
        if count > MAX_PATTERNS:
            raise Unusable(f"its inputSchema has {count:,} distinct patterns; the limit is {MAX_PATTERNS}")
        self._steps = 0
        keywords = {name: self._counted(fn) for name, fn in base.VALIDATORS.items()}
        keywords.update(pattern=self._counted(self._pattern))
        if "patternProperties" in keywords:
            keywords["patternProperties"] = self._counted(self._pattern_properties)
        cls = validators.extend(base, keywords)
        self._validator = cls(
            schema,
            registry=Registry(),  # no retriever: nothing outside the schema is ever fetched
            format_checker=FormatChecker(formats=[f for f in FORMATS if f in FormatChecker.checkers]),
        )

    def problems(self, args: dict[str, Any]) -> list[Problem] | None:
        """Every way *args* break the schema, as problems; None when the check could not finish.

        None means: a ``$ref`` that does not resolve, or more than MAX_STEPS
        keyword evaluations; the caller keeps the contract's own answer.
        """
        from referencing.exceptions import Unresolvable

        self._steps = 0
        found: dict[tuple[str, str | None], Problem] = {}  # one problem per code and field
        try:
            for error in self._validator.iter_errors(args):
                for problem in _problems(error):
                    found.setdefault((problem.code, problem.field), problem)
                if len(found) >= MAX_PROBLEMS:
                    break
        except (_OverBudget, Unresolvable, RecursionError) as exc:
            log.warning("an MCP tool's inputSchema could not be checked in full: %s", type(exc).__name__)
            return None
        finally:
            self._work = 0  # the call's searches end here: the next call's count begins
        return list(found.values())[:MAX_PROBLEMS]

    def _counted(self, fn: Any) -> Any:
        # Each evaluation counts, and so does each error passed up through it: an error
        # found deep under nested $refs costs one step per level it climbs.
        def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
            self._step()
            for error in fn(validator, value, instance, schema) or ():
                self._step()
                yield error

        return keyword

    def _step(self) -> None:
        self._steps += 1
        if self._steps > MAX_STEPS:
            raise _OverBudget

    def _pattern(self, validator: Any, pattern: Any, instance: Any, schema: Any) -> Iterator[Any]:
        from jsonschema import ValidationError

        if isinstance(instance, str) and isinstance(pattern, str) and self.search(pattern, instance) is False:
            yield ValidationError(f"does not match {pattern}")

    def _pattern_properties(self, validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
        if not isinstance(instance, dict) or not isinstance(patterns, dict):
            return
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if self.search(pattern, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _patterns(schema: Any) -> set[str]:
    """The distinct regexes of ``pattern`` and ``patternProperties`` anywhere in *schema* (in a ``const``
    too: counting one too many is harmless), walked without recursion."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.add(node["pattern"])
            if isinstance(node.get("patternProperties"), dict):
                found.update(node["patternProperties"])
            stack.extend(node.values())
    return found


# Checks kept for schemas seen before: a turn builds every tool of its servers, and building one
# (meta-schema validation, the validator class) costs ~20 ms; listings rarely change. Keyed by the
# schema's digest: a refused schema may be MiBs of text. Each entry weighs its schema's bytes.
# Schemas kept at most (the least recently used goes first).
CACHE_SIZE = 512
# Bytes of schema text kept at most, one full listing (pool.MAX_LISTING_CHARS). A check holds ~37 KiB
# (its validator class) and ~5 times its text (the parsed schema), so the cache holds ≤ ~60 MiB.
CACHE_BYTES = 8 * 1024 * 1024
_CACHE: Kept[bytes, SchemaCheck | Unusable] = Kept(CACHE_SIZE, CACHE_BYTES)  # mmd/kept.py


def check_for(schema: Any) -> SchemaCheck:
    """The :class:`SchemaCheck` of *schema*, built once per distinct schema.

    Errors: :class:`Unusable`, as SchemaCheck's constructor (remembered too).
    """
    try:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        raise Unusable("its inputSchema is not JSON") from None
    key = hashlib.sha256(text.encode()).digest()
    found = _CACHE.get(key)
    if found is None:
        try:
            found = SchemaCheck(schema)
        except Unusable as exc:
            found = exc.with_traceback(None)
        # A refusal keeps its message only, not the schema.
        _CACHE.put(key, found, len(text) if isinstance(found, SchemaCheck) else len(str(found)))
    if isinstance(found, Unusable):  # a new one each time: a raised exception keeps its traceback
        raise Unusable(str(found), too_large=found.too_large)
    return found


# -- from jsonschema's errors to the contract's problems ---------------------------------------

# The contract's codes for jsonschema's keywords; any other keyword is "schema_mismatch".
_CODES = {
    "required": "missing_required",
    "type": "wrong_type",
    "enum": "not_in_enum",
    "const": "not_in_enum",
    "pattern": "pattern_mismatch",
    "format": "bad_format",
    "additionalProperties": "unknown_field",
    "unevaluatedProperties": "unknown_field",
    **dict.fromkeys(
        (
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
            "uniqueItems",
        ),
        "out_of_range",
    ),
}


def _problems(error: Any) -> list[Problem]:
    """One problem per field an error is about (``required`` and ``additionalProperties`` may name several)."""
    where = list(error.absolute_path)
    kind, value, schema = error.validator, error.validator_value, error.schema
    code = _CODES.get(kind, "schema_mismatch")
    if kind == "required":
        missing = [n for n in value if isinstance(error.instance, dict) and n not in error.instance]
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        return [_missing(_path([*where, name]), props.get(name)) for name in missing]
    if kind in ("additionalProperties", "unevaluatedProperties"):
        allowed = list(schema.get("properties", {})) if isinstance(schema, dict) else []
        extra = [k for k in error.instance if k not in allowed] if isinstance(error.instance, dict) else []
        return [_unknown(_path([*where, key]), key, allowed) for key in extra] or [
            Problem(code, _path(where) or None, f"{_name(where)} has fields the schema does not allow.", "")
        ]
    field = _path(where) or None
    reason, fix = _say(kind, value, error.instance, _name(where), error)
    return [Problem(code, field, reason, fix)]


def _missing(field: str, prop: Any) -> Problem:
    kind = prop.get("type") if isinstance(prop, dict) else None
    what = f" ({ARTICLE.get(kind, kind)})" if isinstance(kind, str) else ""
    return Problem("missing_required", field, f"{field} is required but missing.", f"Add {field}{what}.")


def _unknown(field: str, key: str, allowed: list[str]) -> Problem:
    maybe = closest(key, allowed)
    reason = f"{field} is not a field here." + (f" Did you mean {maybe[0]}?" if maybe else "")
    fields = ", ".join(allowed) if allowed else "none"
    parent = field.rsplit(".", 1)[0] if "." in field else "the arguments"
    return Problem("unknown_field", field, reason, f"Use only these fields in {parent}: {fields}.")


def _say(kind: str, value: Any, instance: Any, name: str, error: Any) -> tuple[str, str]:
    """(reason, fix) of one error: what was wrong, and what the field should be."""
    got = _show(instance)
    if kind == "type":
        kinds = value if isinstance(value, list) else [value]
        want = " or ".join(ARTICLE.get(k, str(k)) for k in kinds)
        return f"{name} must be {want}; got {got}.", f"Send {name} as {want}."
    if kind in ("enum", "const"):
        allowed = ", ".join(_show(v) for v in (value if kind == "enum" else [value]))
        return f"{name} {got} is not one of {allowed}.", f"Send {name} as one of: {allowed}."
    if kind == "pattern":
        return f"{name} {got} does not match the pattern {value}.", f"Send {name} matching {value}."
    if kind == "format":
        return f"{name} {got} is not a valid {value}.", f"Send {name} as a valid {value}."
    if kind in _BOUNDS:
        return f"{name} {_BOUNDS[kind][0](value)}; got {_measure(kind, instance)}.", (
            f"Send {name} {_BOUNDS[kind][1](value)}."
        )
    if kind in ("oneOf", "anyOf"):
        count = len(value) if isinstance(value, list) else 0
        which = "exactly one" if kind == "oneOf" else "at least one"
        return (
            f"{name} {got} does not match {which} of the {count} shapes the schema allows.",
            f"Send {name} in {which} of these shapes: {_shapes(value)}.",
        )
    return f"{name} breaks the schema's {kind} rule: {_short(error.message)}.", f"Change {name} to fit it."


_BOUNDS = {
    "minimum": (lambda v: f"must be at least {v}", lambda v: f"as a number of at least {v}"),
    "maximum": (lambda v: f"must be at most {v}", lambda v: f"as a number of at most {v}"),
    "exclusiveMinimum": (lambda v: f"must be more than {v}", lambda v: f"as a number more than {v}"),
    "exclusiveMaximum": (lambda v: f"must be less than {v}", lambda v: f"as a number less than {v}"),
    "multipleOf": (lambda v: f"must be a multiple of {v}", lambda v: f"as a multiple of {v}"),
    "minLength": (
        lambda v: f"must have at least {_n(v, 'character')}",
        lambda v: f"with at least {_n(v, 'character')}",
    ),
    "maxLength": (
        lambda v: f"must have at most {_n(v, 'character')}",
        lambda v: f"with at most {_n(v, 'character')}",
    ),
    "minItems": (
        lambda v: f"must have at least {_n(v, 'item')}",
        lambda v: f"as a list of at least {_n(v, 'item')}",
    ),
    "maxItems": (
        lambda v: f"must have at most {_n(v, 'item')}",
        lambda v: f"as a list of at most {_n(v, 'item')}",
    ),
    "minProperties": (
        lambda v: f"must have at least {_n(v, 'field')}",
        lambda v: f"with at least {_n(v, 'field')}",
    ),
    "maxProperties": (
        lambda v: f"must have at most {_n(v, 'field')}",
        lambda v: f"with at most {_n(v, 'field')}",
    ),
    "uniqueItems": (lambda v: "must not repeat an item", lambda v: "with each item once"),
}


def _n(count: Any, unit: str) -> str:
    return f"{count} {unit}{'' if count == 1 else 's'}"


def _measure(kind: str, instance: Any) -> str:
    if kind in ("minLength", "maxLength") and isinstance(instance, str):
        return _n(len(instance), "character")
    if kind in ("minItems", "maxItems") and isinstance(instance, list):
        return _n(len(instance), "item")
    if kind in ("minProperties", "maxProperties") and isinstance(instance, dict):
        return _n(len(instance), "field")
    return _show(instance)


def _shapes(options: Any) -> str:
    """The alternatives of a oneOf/anyOf, each as its type and required fields."""
    out = []
    for option in options if isinstance(options, list) else []:
        if not isinstance(option, dict):
            continue
        kind = option.get("type")
        text = ARTICLE.get(kind, "a value") if isinstance(kind, str) else "a value"
        required = option.get("required")
        if isinstance(required, list) and required:
            text += " with " + ", ".join(str(r) for r in required)
        elif "const" in option or "enum" in option:
            text = " or ".join(_show(v) for v in option.get("enum", [option.get("const")]))
        out.append(text)
    return "; ".join(out) or "see the tool's description"


def _path(parts: Any) -> str:
    """A JSON path as mm writes fields: ``edits[0].oldText``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _name(parts: Any) -> str:
    return _path(parts) or "The arguments"


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "…"


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "…"
