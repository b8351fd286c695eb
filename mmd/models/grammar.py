"""A lazy GBNF grammar that makes a local model's tool call valid by construction.

llama-server constrains decoding to a grammar given with a request. A *lazy*
grammar waits for a trigger in the text: until the model starts a call it
writes freely (an answer, a sentence before the call); from the trigger on,
every token must keep the call valid: the name one of the catalogued tools,
the arguments an object of that tool's schema (types, enums, required keys,
arrays, nested objects; no unknown key), and generation ends where the call
ends, so a small model cannot repeat calls up to the token limit.

The triggers are where small models start a call: a ```json fence, a
``<tool_call>`` tag, or a bare ``{"name":``. What the grammar cannot say — a
``pattern``, a numeric range, a string's length — the contract still checks
(mmd/contract.py) and answers.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import ToolSpec

# llama.cpp's trigger types (common_grammar_trigger_type): 2 is a regular expression.
_PATTERN = 2
TRIGGERS: list[dict[str, Any]] = [
    {"type": _PATTERN, "value": r"```json"},
    {"type": _PATTERN, "value": r"<tool_call>"},
    {"type": _PATTERN, "value": r"\{\s*\"name\"\s*:"},
]

_BASE = r"""
ws ::= [ \t\n]{0,8}
string ::= "\"" char* "\""
char ::= [^"\\\x00-\x1f] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
integer ::= "-"? ("0" | [1-9] [0-9]*)
number ::= integer ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws (string ws ":" ws value (ws "," ws string ws ":" ws value)*)? ws "}"
array ::= "[" ws (value (ws "," ws value)*)? ws "]"
"""


def call_grammar(tools: list[ToolSpec]) -> str:
    """The GBNF of one call of one of *tools*, in any of the triggers' shapes."""
    rules: dict[str, str] = {}
    alternatives = []
    for index, tool in enumerate(tools):
        args = _value(tool.parameters, f"t{index}-args", rules)
        rules[f"t{index}"] = f'{_literal(tool.name)} ws "," ws "\\"arguments\\"" ws ":" ws {args}'
        alternatives.append(f"t{index}")
    rules["call"] = '"{" ws "\\"name\\"" ws ":" ws (' + " | ".join(alternatives) + ') ws "}"'
    rules["root"] = '"```json" ws call ws "```" | "<tool_call>" ws call ws "</tool_call>" | call'
    lines = [f"{name} ::= {body}" for name, body in reversed(rules.items())]
    return "\n".join(lines) + "\n" + _BASE.strip() + "\n"


def _value(schema: Any, name: str, rules: dict[str, str]) -> str:
    """The rule for a value of *schema*, named *name* when it needs a rule of its own."""
    if not isinstance(schema, dict):
        return "value"
    if "enum" in schema:
        return "(" + " | ".join(_literal(v) for v in schema["enum"]) + ")"
    kind = schema.get("type")
    if kind == "object" and isinstance(schema.get("properties"), dict):
        rules[name] = _object(schema, name, rules)
        return name
    if kind == "array":
        item = _value(schema.get("items"), f"{name}-item", rules)
        rules[name] = f'"[" ws ({item} (ws "," ws {item})*)? ws "]"'
        return name
    return {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}.get(
        kind if isinstance(kind, str) else "", "value"
    )


def _object(schema: dict[str, Any], name: str, rules: dict[str, str]) -> str:
    """An object with exactly the schema's keys: required ones always, in order, then optional ones."""
    props: dict[str, Any] = schema["properties"]
    required = [k for k in props if k in set(schema.get("required", ()))]
    optional = [k for k in props if k not in required]
    member = {
        k: f'{_literal(k)} ws ":" ws {_value(v, f"{name}-{_slug(k)}", rules)}' for k, v in props.items()
    }
    if required:
        body = ' ws "," ws '.join(member[k] for k in required)
        body += "".join(f' (ws "," ws {member[k]})?' for k in optional)
    elif optional:
        firsts = [
            member[k] + "".join(f' (ws "," ws {member[o]})?' for o in optional[i + 1 :])
            for i, k in enumerate(optional)
        ]
        body = "(" + " | ".join(f"({f})" for f in firsts) + ")?"
    else:
        body = ""
    return f'"{{" ws {body} ws "}}"' if body else '"{" ws "}"'


def _literal(value: Any) -> str:
    """A GBNF literal matching *value* written as JSON."""
    return json.dumps(json.dumps(value, ensure_ascii=False), ensure_ascii=False)


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower() or "x"


def call_prompt(tools: list[ToolSpec]) -> str:
    """What the system prompt says of the tools when they are not sent as ``tools``."""
    lines = [
        "Tools you can call. To call one, write exactly one block and nothing after it:",
        '```json\n{"name": "<tool name>", "arguments": {<the tool\'s parameters>}}\n```',
        "You will get the result, then answer the user in plain words. The tools:",
    ]
    for tool in tools:
        params = json.dumps(tool.parameters.get("properties", {}), ensure_ascii=False, separators=(",", ":"))
        required = tool.parameters.get("required") or []
        needs = f" Required: {', '.join(required)}." if required else ""
        lines.append(f"- {tool.name}: {tool.description.strip()} Parameters: {params}.{needs}")
    return "\n".join(lines)
