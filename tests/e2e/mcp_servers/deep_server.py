"""A stand-in MCP server over stdio whose every tool answer is one line nested N levels deep.

Hand-written JSON-RPC (one message per line), so that it can write what no SDK would: the
answer to ``tools/call`` puts ``[`` × N in ``structuredContent``. It offers ``echo``, and ``nested``, whose inputSchema nests 40 object schemas (81 levels of JSON).

Run: ``python deep_server.py N``; ``python deep_server.py N wide``: the answer puts N empty objects side by
side instead (``[{}, {}, …]``, 3 bytes each: few bytes, many values).
"""

from __future__ import annotations

import json
import sys

DEPTH = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
WIDE = sys.argv[2:3] == ["wide"]
ECHO = {
    "name": "echo",
    "description": "Echo a text.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "annotations": {"readOnlyHint": True},
}


def _nested_schema(levels: int) -> dict[str, object]:
    schema: dict[str, object] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


NESTED = {"name": "nested", "description": "A tool with a deep schema.", "inputSchema": _nested_schema(40)}


def answer(msgid: object, result: dict[str, object]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msgid, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        method, msgid = message.get("method"), message.get("id")
        if msgid is None:
            continue  # a notification
        if method == "initialize":
            answer(
                msgid,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "deep", "version": "1"},
                },
            )
        elif method == "tools/list":
            answer(msgid, {"tools": [ECHO, NESTED]})
        elif method == "tools/call":
            head = json.dumps({"jsonrpc": "2.0", "id": msgid})[:-1]
            deep = "[" + "{}," * (DEPTH - 1) + "{}]" if WIDE else "[" * DEPTH + "]" * DEPTH
            sys.stdout.write(
                head + ', "result": {"content": [], "structuredContent": {"a": ' + deep + "}}}\n"
            )
            sys.stdout.flush()
        else:
            error = {"code": -32601, "message": f"no method {method}"}
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msgid, "error": error}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
