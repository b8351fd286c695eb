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

-- Completion asks the daemon for its lists (models.list, skills.list, mcp.list).
local function completer(kind)
  return function(lead, cmdline)
    return require('mm').complete(kind, lead, cmdline)
  end
end

command('MmSkill', function(opts)
  require('mm').skill_command(opts)
end, {
  nargs = '+',
  range = true,
  bang = true,
  complete = completer('skills'),
  desc = 'mm: ask in a new session with a skill: its name, then the prompt',
})

command('MmModel', function(opts)
  require('mm').model_command(opts)
end, { nargs = '?', complete = completer('models'), desc = 'mm: the model of the next prompts' })

command('MmMcp', function(opts)
  require('mm').mcp_command(opts)
end, { nargs = '?', complete = completer('mcp'), desc = 'mm: the MCP servers here, or the tools of one' })

command('MmDiff', function(opts)
  require('mm').diff_command(opts)
end, { nargs = '?', desc = "mm: what the session's steps (or step N) changed, in a diff buffer" })

command('MmUndo', function(opts)
  require('mm').undo_command(opts)
end, {
  nargs = '?',
  bang = true,
  desc = "mm: take back the session's last step (or steps N on); ! overwrites files changed since",
})

command('MmTrust', function()
  require('mm').trust_command()
end, { nargs = 0, desc = "mm: trust this project's files that name commands, as they are now" })
