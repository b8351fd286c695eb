-- Driven by tests/e2e/test_nvim_plugin.py: prompts in a project whose mm.yaml has a hook. The first asks
-- and is told "not now", the second asks nothing (said no to that text), :MmTrust asks and trusts, the
-- third asks nothing and runs with the file, and :MmTrust then has nothing to ask. What it saw goes to
-- $MM_TEST_OUT as JSON.
local out = { asked = {}, notified = {} }
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
  vim.notify = function(msg)
    table.insert(out.notified, msg)
  end
  local function prompt(i)
    local before = #out.asked
    vim.cmd('Mm! go')
    out['ended' .. i] = vim.wait(TIMEOUT, function()
      return mm.status().last_status ~= nil
    end, 10)
    out['status' .. i] = mm.status().last_status
    out['asked' .. i] = #out.asked - before
  end
  local function mmtrust(key)
    local before, said = #out.asked, #out.notified
    vim.cmd('MmTrust')
    vim.wait(TIMEOUT, function()
      return #out.notified > said
    end, 10)
    out[key] = { asked = #out.asked - before, said = out.notified[said + 1] }
  end
  prompt(1)
  prompt(2)
  mmtrust('trusting')
  prompt(3)
  mmtrust('nothing_left')
end)

out.ok = ok
out.err = ok and nil or tostring(err)
local f = assert(io.open(os.getenv('MM_TEST_OUT'), 'w'))
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd('qall!')
