"""The MCP stand-in of the eval-ops fixture: the three actions as typed MCP tools (stdio, official SDK).

The tools carry the same names, descriptions and parameter types as the
declared tools of declared.yaml. Each runs its action with an argv list (no
shell) in this folder and returns what the action printed. `mm eval` starts
the server through mcp.yaml.
"""

import subprocess
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

HERE = Path(__file__).resolve().parent
app = MCPServer("platform")
READ = ToolAnnotations(readOnlyHint=True)


def _run(action: str, *args: str) -> str:
    done = subprocess.run(
        [str(HERE / "actions" / action), *args], cwd=HERE, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise ToolError(done.stderr.strip() or f"{action} failed with exit status {done.returncode}")
    return done.stdout.strip()


@app.tool()
def backup(
    database: Annotated[str, Field(description="Database name like inventory", pattern=r"^[a-z][a-z0-9_]*$")],
) -> str:
    """Take a backup of one database now."""
    return _run("backup", database)


@app.tool()
def scale(
    service: Annotated[str, Field(description="Service name like search-api", pattern=r"^[a-z][a-z0-9-]*$")],
    replicas: Annotated[int, Field(description="Number of replicas, 0 to 20", ge=0, le=20)],
) -> str:
    """Set the number of running replicas of one service."""
    return _run("scale", service, str(replicas))


@app.tool(annotations=READ)
def ticket(id: Annotated[str, Field(description="Ticket id like OPS-1032", pattern=r"^[A-Z]+-\d+$")]) -> str:
    """Show one support ticket with its title, state and assignee."""
    return _run("ticket", id)


if __name__ == "__main__":
    app.run("stdio")
