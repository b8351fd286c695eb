"""The Tool base class's capabilities and the built-in tools' table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mmd.config.declared import DeclaredToolSpec, VerifySpec
from mmd.tools.base import Tool, ToolContext, ToolError, ToolResult
from mmd.tools.builtin import BUILTIN_TOOLS, TABLE, make_builtins, tool_class
from mmd.tools.declared import DeclaredTool


class Plain(Tool):
    name = "plain"
    description = "A tool with no capability beyond run."
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    tier = "read"

    def echo(self, args: dict[str, Any]) -> str:
        return "plain"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(ok=True, content="done")


async def test_a_tool_has_no_capability_unless_it_says_so(tmp_path: Path) -> None:
    tool = Plain()
    ctx = ToolContext(session_id="s", call_id="c", cwd=tmp_path, session_dir=tmp_path / "session")
    assert (tool.source, tool.example, tool.prerequisite, tool.verify) == ("builtin", None, None, None)
    assert (tool.idempotent, tool.has_dry_run) == (False, False)
    assert tool.paths({}, ctx) == []
    with pytest.raises(ToolError) as info:
        await tool.dry_run({}, ctx)
    assert (info.value.code, info.value.cls) == ("no_dry_run", "terminal")
    assert ctx.spill_path == tmp_path / "session" / "output-c.log"


def test_a_calls_spill_file_is_named_once_for_the_tool_and_the_outputs_cap(tmp_path: Path) -> None:
    # The tool that spills and the cap of its output (turn/calls.py) read the same path, made once.
    ctx = ToolContext(session_id="s", call_id="c", cwd=tmp_path, session_dir=tmp_path / "session")
    assert ctx.spill_path is ctx.spill_path
    other = ToolContext(session_id="s", call_id="c-verify", cwd=tmp_path, session_dir=tmp_path / "session")
    assert other.spill_path == tmp_path / "session" / "output-c-verify.log"


def test_a_tool_without_run_cannot_be_made() -> None:
    class NoRun(Tool):
        name = "no_run"

        def echo(self, args: dict[str, Any]) -> str:
            return ""

    with pytest.raises(TypeError):
        NoRun()  # type: ignore[abstract]


def test_a_declared_tool_has_its_capabilities_typed(tmp_path: Path) -> None:
    spec = DeclaredToolSpec(
        name="deploy",
        description="Deploy.",
        command=["./deploy.sh"],
        verify=VerifySpec(tool="status"),
        dry_run=["./deploy.sh", "--plan"],
    )
    tool = DeclaredTool(spec, tmp_path)
    assert (tool.verify, tool.idempotent, tool.has_dry_run) == (spec.verify, True, True)
    plain = DeclaredTool(DeclaredToolSpec(name="status", description="Status.", command=["true"]), tmp_path)
    assert (plain.verify, plain.has_dry_run) == (None, False)


def test_the_table_names_every_built_in_tool_once() -> None:
    assert BUILTIN_TOOLS == (
        "bash",
        "read_file",
        "write_file",
        "edit_file",
        "list_files",
        "grep",
        "read_skill",
    )
    for name in TABLE:
        cls = tool_class(name)
        assert issubclass(cls, Tool) and cls.name == name
    assert [t.name for t in make_builtins(["grep", "bash", "nope"])] == ["grep", "bash"]
    assert "read_skill" not in [t.name for t in make_builtins(None)]


def test_the_config_reads_the_tables_without_importing_a_tool_or_a_provider() -> None:
    code = (
        "import sys, mmd.config\n"
        "heavy = ('trio', 'psutil', 'httpx', 'anyio', 'mcp')\n"
        "print(sorted(m for m, v in sys.modules.items() if v is not None and (m.startswith(('mmd.tools.', 'mmd.models.', 'mmd.mcp'))\n"
        "             or m.split('.')[0] in heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['mmd.tools.builtin']"
