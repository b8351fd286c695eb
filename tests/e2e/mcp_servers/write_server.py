"""An MCP stdio server for the sandbox tests: its one tool writes a file where it is told.

``write_text(path, text)`` writes *text* to *path* and answers ``wrote PATH``; a write the
system refuses is answered as a tool error with the OS's words (``[Errno 13] Permission
denied: ...``), so a test sees whether the server ran confined.

Run: ``python write_server.py [--stderr-mib N]`` (stdio); ``--stderr-mib N`` first writes N MiB to stderr, a
server that logs without end.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("writer", instructions="Writes files.")


@app.tool()
def write_text(path: str, text: str) -> str:
    """Write text to a file."""
    try:
        with open(path, "w") as out:
            out.write(text)
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc}") from None
    return f"wrote {path}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stderr-mib"]:
        line = b"x" * 1023 + b"\n"
        for _ in range(int(sys.argv[2]) * 1024):
            sys.stderr.buffer.write(line)
        sys.stderr.flush()
    app.run("stdio")
