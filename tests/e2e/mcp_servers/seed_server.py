"""An MCP server for the tests, written with the official SDK's server side (MCPServer).

It exposes the seed's three tools — ``release <version> <channel>``, ``pkgtest <package>``,
``status <service>`` — and a few more that the allowlist must keep out, or that the tests
use to reach the edges: a destructive tool, one whose name clashes with a built-in, a
flood of output, an image, a failure, and one that blocks until it is killed.

Every tool call appends ``{"tool", "args"}`` as a JSON line to the file named by
``$MM_MCP_LOG``; every JSON-RPC request or notification the server receives appends
``{"method"}``, and each start ``{"event": "start", "pid", "transport"}``, so the tests judge
from the server side what really reached it (how many handshakes, which arguments).

Run: ``python seed_server.py stdio`` or ``python seed_server.py http [PORT]`` (it prints
``listening http://127.0.0.1:PORT/mcp`` once it accepts connections; port 0 picks one).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import EmbeddedResource, ImageContent, TextContent, TextResourceContents, ToolAnnotations
from pydantic import Field

# A 1×1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def record(entry: dict[str, Any]) -> None:
    path = os.environ.get("MM_MCP_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps(entry) + "\n")


async def log_methods(ctx: Any, call_next: Any) -> Any:
    entry: dict[str, Any] = {"method": ctx.method, "pid": os.getpid()}
    headers = getattr(ctx.request, "headers", None)  # the HTTP request's; None over stdio
    if headers is not None:
        entry["authorization"] = headers.get("authorization")
    params = ctx.params or {}
    if ctx.method == "tools/call":
        entry["name"] = params.get("name")
        entry["idempotency_key"] = (params.get("_meta") or {}).get("mm/idempotency-key")
    record(entry)
    return await call_next(ctx)


app = MCPServer("seed", instructions="The release team's tools.", middleware=[log_methods])


@app.tool()
def release(
    version: Annotated[str, Field(description="Version like 1.4.2", pattern=r"^\d+\.\d+\.\d+$")],
    channel: Literal["stable", "beta"],
) -> str:
    """Publish a release of the product to one channel."""
    record({"tool": "release", "args": {"version": version, "channel": channel}})
    return f"Released {version} to the {channel} channel."


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def pkgtest(package: Annotated[str, Field(description="Package name like greet")]) -> str:
    """Run the test suite of one package."""
    record({"tool": "pkgtest", "args": {"package": package}})
    return f"{package}: 12 passed"


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def status(service: Annotated[str, Field(description="Service name like billing")]) -> str:
    """Report the status of one of the company's services."""
    record({"tool": "status", "args": {"service": service}})
    return f"{service}: up since 09:00"


@app.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=True))
def wipe(service: str) -> str:
    """Delete every deployment of one service."""
    record({"tool": "wipe", "args": {"service": service}})
    return f"wiped {service}"


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_file(path: str) -> str:
    """Read a file on the release server (its name clashes with mm's built-in)."""
    record({"tool": "read_file", "args": {"path": path}})
    return f"contents of {path}"


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def flood(lines: int = 5000) -> str:
    """Print many numbered lines."""
    record({"tool": "flood", "args": {"lines": lines}})
    return "".join(f"line {i}\n" for i in range(1, lines + 1))


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def picture(caption: str) -> list[TextContent | ImageContent | EmbeddedResource]:
    """Return an image with a caption, and the caption as an embedded resource."""
    record({"tool": "picture", "args": {"caption": caption}})
    return [
        TextContent(type="text", text=caption),
        ImageContent(type="image", data=base64.b64encode(PIXEL).decode(), mime_type="image/png"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="memo://caption", mime_type="text/plain", text=f"caption: {caption}"
            ),
        ),
    ]


@app.tool()
def deploy(service: str) -> str:
    """Deploy one service; the deploy system is down, so it always fails."""
    record({"tool": "deploy", "args": {"service": service}})
    raise ToolError(f"the deploy system refused {service}: maintenance window")


LONG_NAME = "report_the_status_of_every_service_of_the_company_including_those_nobody_uses_anymore"


@app.tool(name=LONG_NAME, annotations=ToolAnnotations(readOnlyHint=True))
def long_named(region: str) -> str:
    """Report every service of one region (a tool name longer than providers accept)."""
    record({"tool": LONG_NAME, "args": {"region": region}})
    return f"{region}: all up"


@app.tool()
async def hang(label: str) -> str:
    """Block until the server is killed (for the tests of a call in flight)."""
    record({"tool": "hang", "args": {"label": label}, "pid": os.getpid()})
    await anyio.sleep(3600)
    return "never"


@app.resource("memo://release-notes", mime_type="text/markdown", description="The notes of the next release.")
def release_notes() -> str:
    return "# 1.4.2\n- faster greet\n"


@app.prompt(description="Ask for a release checklist.")
def checklist(version: str) -> str:
    return f"Write the release checklist for {version}."


def serve_http(port: int) -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), log_level="warning", lifespan="on"))

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            while not server.started:
                await anyio.sleep(0.01)
            print(f"listening {url}", flush=True)

    anyio.run(main)


def main() -> None:
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    # Whether the daemon's environment leaked in (a stdio server gets only what its config passes).
    leaked = "MM_TEST_DAEMON_SECRET" in os.environ
    record({"event": "start", "pid": os.getpid(), "transport": transport, "leaked": leaked})
    if transport == "http":
        serve_http(int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    else:
        app.run("stdio")


if __name__ == "__main__":
    main()
