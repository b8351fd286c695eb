""":MmDiff and :MmUndo in a real headless Neovim, against a real mmd, real git and the scripted model."""

from __future__ import annotations

import json
import shutil

import pytest

from .test_nvim_plugin import run_nvim

pytestmark = [
    pytest.mark.nvim,
    pytest.mark.skipif(shutil.which("nvim") is None, reason="Neovim is not installed (Debian: neovim)"),
]

UNDO = """
local mm = require('mm')
mm.setup({ yolo = true, split = 'split' })
local out, notes = {}, {}
vim.notify = function(msg) table.insert(notes, msg) end
local function wait(fn) return vim.wait(60000, fn, 10) end
vim.cmd('edit notes.txt')
vim.cmd('Mm! rewrite the notes')
out.ended = wait(function() return mm.status().last_status ~= nil end)
out.status = mm.status().last_status
out.answer = vim.api.nvim_buf_get_lines(vim.fn.bufnr('mm://answer'), 0, -1, false)
vim.cmd('checktime')
out.buffer_after_turn = vim.api.nvim_buf_get_lines(0, 0, -1, false)
vim.cmd('MmDiff')
wait(function() return vim.fn.bufnr('mm://diff') ~= -1 and #vim.api.nvim_buf_get_lines(vim.fn.bufnr('mm://diff'), 0, -1, false) > 2 end)
out.diff = vim.api.nvim_buf_get_lines(vim.fn.bufnr('mm://diff'), 0, -1, false)
out.filetype = vim.bo[vim.fn.bufnr('mm://diff')].filetype
vim.cmd('MmDiff two')
vim.cmd('MmUndo')
wait(function() return #notes >= 2 end)
vim.cmd('wincmd t')
out.buffer_after_undo = vim.api.nvim_buf_get_lines(vim.fn.bufnr('notes.txt'), 0, -1, false)
out.notes = notes
local f = assert(io.open(os.getenv('MM_TEST_OUT'), 'w'))
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd('qall!')
"""


def test_mmdiff_shows_the_steps_in_a_diff_buffer_and_mmundo_restores_the_file(
    mm_home, scripted, daemon, tmp_path
):
    scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "printf 'new\\n' > notes.txt"}}]},
            {"text": "Rewritten."},
        ]
    )
    work = mm_home / "work"
    (work / "notes.txt").write_text("old\n")
    script = tmp_path / "undo.lua"
    script.write_text(UNDO)
    out = tmp_path / "out.json"
    run_nvim(work, "-c", f"luafile {script}", env={"MM_TEST_OUT": str(out)})
    result = json.loads(out.read_text())

    assert result["ended"] and result["status"] == "ok", result
    assert result["buffer_after_turn"] == ["new"]
    assert "  changed: M notes.txt (step 1: :MmUndo)" in result["answer"]
    assert result["filetype"] == "diff"
    assert result["diff"][0].startswith("# step 1  bash: ") and "(M notes.txt)" in result["diff"][0]
    assert "-old" in result["diff"] and "+new" in result["diff"]
    assert result["notes"][0] == "mm: two is not a step number: :MmDiff lists the steps (1, 2, …)"
    assert result["notes"][1].startswith("mm: restored to before step 1: M notes.txt (this undo is step 2")
    assert (work / "notes.txt").read_text() == "old\n"
    assert result["buffer_after_undo"] == ["old"]  # the buffer was read again
