"""The plugin's completion of skill names, model aliases and MCP server names, from a real mmd, in a real
headless Neovim; and :MmSkill and :MmModel on a turn with the scripted model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from .test_nvim_plugin import run_nvim, user_message

pytestmark = [
    pytest.mark.nvim,
    pytest.mark.skipif(shutil.which("nvim") is None, reason="Neovim is not installed (Debian: neovim)"),
]

COMPLETE = """
local mm = require('mm')
local out = {}
out.skills = vim.fn.getcompletion('MmSkill ', 'cmdline')
out.skills_re = vim.fn.getcompletion("'<,'>MmSkill re", 'cmdline')
out.prompt_words = vim.fn.getcompletion('MmSkill release pu', 'cmdline')
out.models = vim.fn.getcompletion('MmModel ', 'cmdline')
out.mcp = vim.fn.getcompletion('MmMcp g', 'cmdline')
local notes = {}
vim.notify = function(msg) table.insert(notes, msg) end
vim.cmd('MmModel fast')
vim.cmd('MmSkill! release publish 1.4')
out.ended = vim.wait(60000, function() return mm.status().last_status ~= nil end, 10)
out.status = mm.status()
vim.cmd('MmSkill! nope do it')
out.notes = notes
local f = assert(io.open(os.getenv('MM_TEST_OUT'), 'w'))
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd('qall!')
"""


def write_skill(folder: Path, name: str) -> None:
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: How to {name}.\n---\nDo {name}.\n")


def add_config(home: Path, **extra: Any) -> None:
    path = home / "config" / "mm" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**config, **extra}))


def test_commands_complete_skills_models_and_mcp_servers_from_the_daemon(mm_home, scripted, daemon, tmp_path):
    server = scripted([{"text": "Published."}])
    add_config(
        mm_home,
        models={
            "coder": {"provider": "script", "model": "scripted"},
            "fast": {"provider": "script", "model": "quick"},
        },
        mcp={
            "github": {"command": "/bin/true", "enabled": False},
            "gitlab": {"command": "/bin/true", "enabled": False},
            "docs": {"command": "/bin/true", "enabled": False},
        },
    )
    work = mm_home / "work"
    write_skill(work / ".claude" / "skills" / "release", "release")
    write_skill(work / ".agents" / "skills" / "review", "review")
    write_skill(work / ".mm" / "skills" / "lint", "lint")
    script = tmp_path / "complete.lua"
    script.write_text(COMPLETE)
    out = tmp_path / "out.json"
    run_nvim(work, "-c", f"luafile {script}", env={"MM_TEST_OUT": str(out)})
    result = json.loads(out.read_text())

    assert result["skills"] == ["lint", "release", "review"]
    assert result["skills_re"] == ["release", "review"]
    assert result["prompt_words"] == []  # after the skill comes the prompt: free text
    assert result["models"][:2] == ["coder", "fast"]  # then any installed local/ model
    assert sorted(result["mcp"]) == ["github", "gitlab"]

    assert result["ended"] and result["status"]["last_status"] == "ok", result
    [request] = server.requests()
    assert request["body"]["model"] == "quick"  # :MmModel fast
    assert user_message(request) == (
        "publish 1.4\n\nUse the skill release: read it with read_skill first, then follow it."
    )
    assert result["notes"][-1] == "mm: no skill named nope here; the skills: lint, release, review"
