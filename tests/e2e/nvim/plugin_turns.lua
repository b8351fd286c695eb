-- Driven by tests/e2e/test_nvim_plugin.py in a real headless Neovim, against a real mmd and the
-- scripted model. It runs three turns through the plugin's commands and writes what it saw to
-- $MM_TEST_OUT as JSON; the Python test makes the assertions.
local out = {}
local work = os.getenv('MM_TEST_WORK')
-- A guard against a hang, not a measurement: long enough for a slow CI machine.
local TIMEOUT = 60000

local function write_out()
  local f = assert(io.open(os.getenv('MM_TEST_OUT'), 'w'))
  f:write(vim.fn.json_encode(out))
  f:close()
end

local ok, err = pcall(function()
  local mm = require('mm')
  local kinds = {}
  mm.setup({
    split = 'split',
    on_event = function(ev)
      table.insert(kinds, ev.kind)
    end,
  })

  local function turn(command)
    kinds = {}
    vim.cmd(command)
    local ended = vim.wait(TIMEOUT, function()
      return mm.status().last_status ~= nil
    end, 10)
    local buf = vim.fn.bufnr('mm://answer')
    return {
      ended = ended,
      status = mm.status().last_status,
      error = mm.status().last_error,
      session_id = mm.status().session_id,
      kinds = kinds,
      lines = buf > 0 and vim.api.nvim_buf_get_lines(buf, 0, -1, false) or {},
    }
  end

  vim.cmd('edit ' .. work .. '/notes.txt')

  -- 1. A prompt with the whole buffer as context; the answer streams into the answer buffer.
  out.first = turn('Mm what is in this file?')
  out.answer_window = vim.fn.bufwinid('mm://answer') ~= -1
  out.focus_stayed = vim.api.nvim_buf_get_name(0) == work .. '/notes.txt'

  -- 2. A tool call that needs consent, answered through vim.ui.select.
  vim.ui.select = function(items, opts, on_choice)
    out.consent = { items = items, prompt = opts.prompt, kind = opts.kind }
    on_choice('Allow once', 1)
  end
  out.second = turn('MmContinue! now write the file')

  -- 3. A slow turn with lines 2-3 as context, cancelled once it has started.
  kinds = {}
  vim.cmd('2,3MmContinue this will be slow')
  out.started = vim.wait(TIMEOUT, function()
    return vim.tbl_contains(kinds, 'turn_started')
  end, 10)
  out.running_before_cancel = mm.status().running
  local seen = kinds
  out.third = turn('MmCancel')
  out.third.kinds = vim.list_extend(seen, out.third.kinds)
end)

out.ok = ok
out.err = ok and nil or tostring(err)
write_out()
vim.cmd('qall!')
