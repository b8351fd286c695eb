-- mm.nvim: commands of the mm agent harness. The work happens in lua/mm/init.lua, loaded on first use.
if vim.g.loaded_mm then
  return
end
vim.g.loaded_mm = true

if vim.fn.has('nvim-0.7') == 0 then
  vim.api.nvim_err_writeln('mm.nvim needs Neovim 0.7 or newer')
  return
end

local command = vim.api.nvim_create_user_command

command('Mm', function(opts)
  require('mm').command(opts, false)
end, {
  nargs = '*',
  range = true,
  bang = true,
  desc = 'mm: ask in a new session, with the buffer (or the range) as context; ! sends no context',
})

command('MmContinue', function(opts)
  require('mm').command(opts, true)
end, {
  nargs = '*',
  range = true,
  bang = true,
  desc = 'mm: continue the last session, with the buffer (or the range) as context',
})

command('MmCancel', function()
  require('mm').cancel()
end, { nargs = 0, desc = 'mm: cancel the running turn' })
