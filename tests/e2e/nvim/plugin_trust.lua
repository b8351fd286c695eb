-- Driven by tests/e2e/test_nvim_plugin.py: three prompts in a project whose mm.yaml has a hook, the trust
-- question answered "not now", then "trust", then not asked; what it saw goes to $MM_TEST_OUT as JSON.
local out = { asked = {} }
local TIMEOUT = 60000 -- a guard against a hang, not a measurement

local ok, err = pcall(function()
  local mm = require('mm')
  mm.setup({ split = 'split', yolo = true })
  local answers = { 'Not now: go without them', 'Trust them as they are now' }
  vim.ui.select = function(items, opts, on_choice)
    table.insert(out.asked, { items = items, prompt = opts.prompt, kind = opts.kind })
    local choice = table.remove(answers, 1)
    on_choice(choice, choice and vim.fn.index(items, choice) + 1 or nil)
  end
  for i = 1, 3 do
    local before = #out.asked
    vim.cmd('Mm! go')
    out['ended' .. i] = vim.wait(TIMEOUT, function()
      return mm.status().last_status ~= nil
    end, 10)
    out['status' .. i] = mm.status().last_status
    out['asked' .. i] = #out.asked - before
  end
  -- :MmTrust on its own, once all is trusted: it says so, and asks nothing.
  local notified = {}
  vim.notify = function(msg)
    table.insert(notified, msg)
  end
  local before = #out.asked
  vim.cmd('MmTrust')
  vim.wait(TIMEOUT, function()
    return #notified > 0
  end, 10)
  out.mmtrust = { notified = notified, asked = #out.asked - before }
end)

out.ok = ok
out.err = ok and nil or tostring(err)
local f = assert(io.open(os.getenv('MM_TEST_OUT'), 'w'))
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd('qall!')
