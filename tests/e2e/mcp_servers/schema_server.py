"""An MCP server whose tools declare raw JSON Schemas, written with the SDK's low-level server.

Its tools are the shapes mm's own subset of JSON Schema let through before it
checked the whole schema: ``edit`` (the filesystem server's edit_file: nested
required fields, ``minItems``, no extra keys), ``schedule`` (``oneOf``,
``exclusiveMinimum``, ``format``), ``legacy`` (a draft-07 schema), and hostile ones:
``greedy`` (a catastrophic ``pattern``), ``remote`` (a ``$ref`` to a URL, given in
$MM_SCHEMA_REF_URL), ``bomb`` (``$ref``s that double the work 40 times) and ``huge``
(an inputSchema of about 300 KB).

Every request it receives is appended to $MM_MCP_LOG as ``{"method", ...}`` — for
``tools/call`` with the tool's name and the arguments as received — before anything
else is done with it, so a test sees exactly what reached the server.

Run: ``python schema_server.py stdio`` or ``python schema_server.py sse [PORT]`` (it
prints ``listening http://127.0.0.1:PORT/sse`` once it accepts connections).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

REF_URL = os.environ.get("MM_SCHEMA_REF_URL", "http://127.0.0.1:9/schema.json")

EDIT = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "edits": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
                "required": ["oldText", "newText"],
                "additionalProperties": False,
            },
        },
        "dryRun": {"type": "boolean", "default": False},
    },
    "required": ["path", "edits"],
    "additionalProperties": False,
}
SCHEDULE = {
    "type": "object",
    "properties": {
        "when": {"type": "string", "format": "date"},
        "every": {"type": "number", "exclusiveMinimum": 0},
        "target": {
            "oneOf": [
                {"type": "object", "properties": {"host": {"type": "string"}}, "required": ["host"]},
                {"type": "object", "properties": {"group": {"type": "string"}}, "required": ["group"]},
            ]
        },
    },
    "required": ["when", "every", "target"],
}
LEGACY = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
    "required": ["tags"],
}
GREEDY = {
    "type": "object",
    "properties": {"word": {"type": "string", "pattern": "^(a+)+$"}},
    "required": ["word"],
}
REMOTE = {"type": "object", "properties": {"spec": {"$ref": REF_URL}}, "required": ["spec"]}
BOMB_DEFS: dict[str, Any] = {
    f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]} for i in range(40)
}
BOMB_DEFS["d40"] = {"type": "string"}
BOMB = {"type": "object", "$defs": BOMB_DEFS, "properties": {"value": {"$ref": "#/$defs/d0"}}}
HUGE = {
    "type": "object",
    "properties": {f"field_{i}": {"type": "string", "description": "x" * 300} for i in range(1000)},
}
TOOLS = {
    "edit": ("Edit a text file by replacing exact text.", EDIT),
    "schedule": ("Schedule a job.", SCHEDULE),
    "legacy": ("Tag a build.", LEGACY),
    "greedy": ("Say a word of a's.", GREEDY),
    "remote": ("Apply a spec.", REMOTE),
    "bomb": ("Store a value.", BOMB),
    "huge": ("Take a thousand fields.", HUGE),
}


def record(entry: dict[str, Any]) -> None:
    path = os.environ.get("MM_MCP_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps(entry) + "\n")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    record({"method": "tools/list", "pid": os.getpid()})
    tools = [types.Tool(name=n, description=d, input_schema=s) for n, (d, s) in TOOLS.items()]
    return types.ListToolsResult(tools=tools)


async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
    record({"method": "tools/call", "name": params.name, "args": params.arguments})
    text = f"{params.name} done: {json.dumps(params.arguments, sort_keys=True)}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("schemas", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_sse(port: int) -> None:
    import uvicorn
    from mcp.server.sse import SseServerTransport
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Mount, Route

    sse = SseServerTransport("/messages/")

    async def handle(request: Any) -> Response:
        async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return Response()

    app = Starlette(routes=[Route("/sse", handle), Mount("/messages/", app=sse.handle_post_message)])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/sse"
    uvicorn_server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(uvicorn_server.serve, [sock])
            while not uvicorn_server.started:
                await anyio.sleep(0.01)
            print(f"listening {url}", flush=True)

    anyio.run(main)


def main() -> None:
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    record({"event": "start", "pid": os.getpid(), "transport": transport})
    if transport == "sse":
        serve_sse(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        anyio.run(serve_stdio)


if __name__ == "__main__":
    main()
