-- Driven by tests/e2e/adversarial/test_nvim_socket.py in a real headless Neovim: one `daemon.status`
-- request through the plugin, with no daemon started on demand; what came back goes to $MM_TEST_OUT as JSON.
local out = {}
local ok, err = pcall(function()
  local mm = require('mm')
  mm.setup({ autostart = false })
  local done = false
  mm.request('daemon.status', {}, function(request_err, result)
    out.err = request_err
    out.answered = result ~= nil
    done = true
  end)
  -- A guard against a hang, not a measurement.
  out.ended, out.wait_code = vim.wait(60000, function()
    return done
  end, 10)
end)
out.ok, out.lua_error = ok, ok and nil or tostring(err)
local f = assert(io.open(os.getenv('MM_TEST_OUT'), 'w'))
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd('qa!')
