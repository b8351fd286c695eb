"""The MCP stand-in of the eval: the three actions as typed MCP tools (stdio, official SDK).

The tools carry the same names, descriptions and parameter types as the
declared tools of declared.yaml. Each runs its action with an argv list (no
shell) in this folder and returns what the action printed. `mm eval` starts
the server through mcp.yaml.
"""

import subprocess
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

HERE = Path(__file__).resolve().parent
app = MCPServer("ops")
READ = ToolAnnotations(readOnlyHint=True)


def _run(action: str, *args: str) -> str:
    done = subprocess.run(
        [str(HERE / "actions" / action), *args], cwd=HERE, capture_output=True, text=True, timeout=60
    )
    if done.returncode != 0:
        raise ToolError(done.stderr.strip() or f"{action} failed with exit status {done.returncode}")
    return done.stdout.strip()


@app.tool()
def release(
    version: Annotated[str, Field(description="Version like 1.4.2", pattern=r"^\d+\.\d+\.\d+$")],
    channel: Literal["stable", "beta"],
) -> str:
    """Publish a release of the product to one channel."""
    return _run("release", version, channel)


@app.tool(annotations=READ)
def pkgtest(
    package: Annotated[str, Field(description="Package name like parser", pattern=r"^[a-z][a-z0-9-]*$")],
) -> str:
    """Run the test suite of one package."""
    return _run("pkgtest", package)


@app.tool(annotations=READ)
def status(service: Annotated[str, Field(description="Service name like search")]) -> str:
    """Report the status of one of the company's services."""
    return _run("status", service)


if __name__ == "__main__":
    app.run("stdio")
