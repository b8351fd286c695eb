"""An MCP stdio server that lists more tools than any real one: PAGES pages of TOOLS tools, each with a
description of CHARS characters, over plain JSON-RPC lines (no SDK: it must answer fast and exactly).

Run: ``python big_server.py TOOLS CHARS PAGES LOG``; each tools/list request's cursor is appended to LOG.
"""

from __future__ import annotations

import json
import sys


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    tools, chars, pages, log = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    for line in sys.stdin:
        message = json.loads(line)
        method, ident = message.get("method"), message.get("id")
        if method == "initialize":
            version = message["params"]["protocolVersion"]
            info = {"name": "big", "version": "1"}
            send(
                {
                    "jsonrpc": "2.0",
                    "id": ident,
                    "result": {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info},
                }
            )
        elif method == "tools/list":
            page = int((message.get("params") or {}).get("cursor") or 0)
            with open(log, "a") as f:
                f.write(f"{page}\n")
            schema = {"type": "object", "properties": {"x": {"type": "string"}}}
            listed = [
                {"name": f"t{page}_{k}", "description": "d" * chars, "inputSchema": schema}
                for k in range(tools)
            ]
            result: dict = {"tools": listed}
            if page + 1 < pages:
                result["nextCursor"] = str(page + 1)
            send({"jsonrpc": "2.0", "id": ident, "result": result})
        elif ident is not None:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
