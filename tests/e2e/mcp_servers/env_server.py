"""An MCP stdio server for the secrets tests: it shows the environment it was started with.

At start it writes its whole environment as one JSON object to the file named by
``$MM_ENV_DUMP`` (when set), and its one tool, ``show_env``, answers the environment
as ``NAME=value`` lines, so a test sees both what the process got and what would
reach the model.

Run: ``python env_server.py`` (stdio).
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("envdump", instructions="Shows its environment.")


@app.tool(annotations=ToolAnnotations(readOnlyHint=True))
def show_env() -> str:
    """Print the server's environment, one NAME=value per line."""
    return "\n".join(f"{name}={value}" for name, value in sorted(os.environ.items()))


def main() -> None:
    dump = os.environ.get("MM_ENV_DUMP")
    if dump:
        with open(dump, "w") as out:
            json.dump(dict(os.environ), out)
    app.run("stdio")


if __name__ == "__main__":
    main()
