-- mm.nvim: the Neovim client of mmd, the mm agent daemon.
--
-- It speaks mmd's msgpack-RPC (docs/protocol.md) itself over a libuv pipe rather than through
-- sockconnect(..., {rpc = true}): on an RPC channel Neovim treats every incoming notification as
-- a call of its own API, so mmd's `event` notifications would be refused as unknown methods.
-- Messages are msgpack objects written back to back; vim.mpack.Unpacker splits the stream.
--
-- Everything is asynchronous: libuv callbacks only schedule work onto the main loop.

local M = {}

M.version = '0.1.0'

local uv = vim.uv or vim.loop
local trust = require('mm.trust')
local PROTOCOL = 1 -- the protocol version this plugin speaks (docs/protocol.md)
local HANDSHAKE_TIMEOUT_MS = 10000 -- mmd answers the handshake at once (the CLI waits as long)

local defaults = {
  socket = nil, -- nil: $MM_SOCKET, else $XDG_RUNTIME_DIR/mm/mmd.sock, else /tmp/mm-<uid>/mmd.sock
  cmd = { 'mm' }, -- the mm command; `cmd daemon start` starts the daemon when none answers
  autostart = true,
  agent = nil, -- agent file; nil: ./mm.yaml, then ./.mm/agent.yaml in the working directory
  model = nil, -- PROVIDER/MODEL or an alias from config.yaml
  yolo = false, -- run write tools without asking (destructive tools still ask)
  max_context_bytes = 256 * 1024, -- larger buffers or selections are cut, with a note to the model
  split = 'botright vsplit', -- the command that opens a window for the answer buffer
  on_event = nil, -- function(event): called with every event of the current turn
}

local config = vim.deepcopy(defaults)

-- The connection to mmd: nil, or {pipe, unpacker, msgid, pending, ready, waiters}.
local conn = nil

-- The current session as this Neovim sees it.
local state = {
  session_id = nil, -- the session the answer buffer shows
  after_seq = 0, -- events with seq <= after_seq belong to earlier turns
  running = false, -- a turn started here has not ended
  waiting = false, -- session.prompt was sent, its response has not come
  early = {}, -- events that arrived before the response of session.prompt
  last_status = nil, -- status of the last turn that ended: ok, error, cancelled, denied, max_steps
  last_error = nil,
  declined = {}, -- path .. ' ' .. digest of the project files the person said no to: not asked again
}

local answer = { buf = nil, mode = nil } -- mode: what the last line holds, for streaming

local function present(v)
  return v ~= nil and v ~= vim.NIL
end

local function notify(msg, level)
  vim.notify('mm: ' .. msg, level or vim.log.levels.INFO)
end

-- Text mm did not write (a command, a path) as a question shows it: every control character, the C1
-- controls and the bidirectional overrides and marks as escapes (\x1b, \u202e), as the CLI's terminal.code
-- does, and tab and line feed too: a message obeys \r, and one command stays one run of text. Whole:
-- the message area wraps it, and what a person approves is never cut.
local function inert(text)
  local s = tostring(text):gsub('[%z\1-\31\127]', function(c)
    return string.format('\\x%02x', c:byte())
  end)
  s = s:gsub('\194([\128-\159])', function(c)
    return string.format('\\x%02x', c:byte())
  end)
  s = s:gsub('\226\128([\142\143\170-\174])', function(c)
    return string.format('\\u%04x', 0x2000 + c:byte() - 128)
  end)
  s = s:gsub('\226\129([\166-\169])', function(c)
    return string.format('\\u%04x', 0x2040 + c:byte() - 128)
  end)
  return s
end

local function error_message(err)
  -- mmd's errors are [kind, "code: message"], the shape Neovim itself uses.
  if type(err) == 'table' and type(err[2]) == 'string' then
    return err[2]
  end
  return type(err) == 'string' and err or vim.inspect(err)
end

-- -- setup ------------------------------------------------------------------------

function M.setup(opts)
  config = vim.tbl_deep_extend('force', vim.deepcopy(defaults), opts or {})
end

function M.socket_path()
  if config.socket then
    return config.socket
  end
  local env = os.getenv('MM_SOCKET')
  if env and env ~= '' then
    return env
  end
  local runtime = os.getenv('XDG_RUNTIME_DIR')
  if runtime and runtime:sub(1, 1) == '/' then
    return runtime .. '/mm/mmd.sock'
  end
  return '/tmp/mm-' .. uv.getuid() .. '/mmd.sock'
end

-- -- the connection -------------------------------------------------------------------

local dispatch -- forward declaration: handles one decoded message

local function disconnect(reason)
  local old = conn
  conn = nil
  if not old then
    return
  end
  if old.pipe and not old.pipe:is_closing() then
    old.pipe:close()
  end
  for _, cb in pairs(old.pending) do
    cb(reason, nil)
  end
  for _, cb in ipairs(old.waiters) do
    cb(reason)
  end
  -- A prompt still waiting for its response was ended by its callback above; this is a turn that
  -- was streaming when the connection broke.
  if state.running or state.waiting then
    state.running, state.waiting = false, false
    state.last_status, state.last_error = 'error', reason
    M._line('— ' .. reason)
  end
end

local function on_bytes(data)
  if not conn then
    return
  end
  local pos = 1
  while pos <= #data do
    local ok, msg, next_pos = pcall(conn.unpacker, data, pos)
    if not ok then
      disconnect('mmd sent bytes that are not msgpack (' .. tostring(msg) .. ')')
      return
    end
    pos = next_pos
    if msg ~= nil then -- nil: the object continues in the next chunk (the unpacker keeps it)
      dispatch(msg)
      if not conn then
        return
      end
    end
  end
end

local function request(method, params, cb)
  if not (conn and conn.pipe) then
    cb('mmd is not connected', nil)
    return
  end
  conn.msgid = conn.msgid + 1
  conn.pending[conn.msgid] = cb
  conn.pipe:write(vim.mpack.encode({ 0, conn.msgid, method, params == nil and {} or { params } }))
end

dispatch = function(msg)
  if type(msg) ~= 'table' then
    return
  end
  if msg[1] == 1 then -- response [1, msgid, error, result]
    local cb = conn.pending[msg[2]]
    conn.pending[msg[2]] = nil
    if cb then
      cb(present(msg[3]) and error_message(msg[3]) or nil, msg[4])
    end
  elseif msg[1] == 2 then -- notification [2, method, params]
    local arg = type(msg[3]) == 'table' and msg[3][1] or nil
    if msg[2] == 'event' and type(arg) == 'table' then
      M._on_event(arg)
    elseif msg[2] == 'error' then
      local text = type(arg) == 'table' and present(arg.message) and arg.message or vim.inspect(arg)
      disconnect('mmd closed the connection: ' .. text)
      notify(text, vim.log.levels.ERROR)
    end
  end
end

-- The longest path a Unix socket's address holds (mmd/rpc/unix.py). Past it the socket is reached as mm and
-- mmd reach it: through its folder opened as a file descriptor, /proc/self/fd/N/<name>.
local MAX_SOCKET_PATH = 107

-- The path to connect to for *path* and the folder's fd to close once connected (nil when none was
-- opened); or nil, nil, why: the folder is not there (an ENOENT, as a connect says: mmd is started) or the
-- path cannot be made short.
local function short_path(path)
  if #path <= MAX_SOCKET_PATH then
    return path, nil
  end
  local folder, name = path:match('^(.*)/([^/]+)$')
  local fd, err = uv.fs_open(folder ~= '' and folder or '/', 'r', 0) -- O_RDONLY of a folder, O_CLOEXEC
  if not fd then
    return nil, nil, err
  end
  local short = '/proc/self/fd/' .. fd .. '/' .. name
  if #short <= MAX_SOCKET_PATH and uv.fs_stat('/proc/self/fd/' .. fd) then
    return short, fd
  end
  uv.fs_close(fd)
  return nil, nil, string.format(
    'the socket path %s is %d bytes, past the %d a Unix socket\'s address may hold, and %s: set MM_SOCKET '
      .. "(or socket in require('mm').setup()) to a shorter path, such as /tmp/mm-%d/mmd.sock",
    path, #path, MAX_SOCKET_PATH,
    #short > MAX_SOCKET_PATH and 'its file name alone is too long' or '/proc is not mounted here',
    uv.getuid())
end

local function open_pipe(path, cb)
  local target, fd, why = short_path(path)
  if not target then
    vim.schedule(function()
      cb(why, nil)
    end)
    return
  end
  local pipe = uv.new_pipe(false)
  pipe:connect(
    target,
    vim.schedule_wrap(function(err)
      if fd then
        uv.fs_close(fd)
      end
      if err then
        pipe:close()
        cb(err, nil)
      else
        cb(nil, pipe)
      end
    end)
  )
end

local function start_daemon(path, cb)
  local cmd = vim.list_extend(vim.deepcopy(config.cmd), { 'daemon', 'start' })
  local stderr = {}
  local ok, job = pcall(vim.fn.jobstart, cmd, {
    env = { MM_SOCKET = path },
    stderr_buffered = true,
    on_stderr = function(_, data)
      stderr = data or {}
    end,
    on_exit = function(_, code)
      if code == 0 then
        cb(nil)
      else
        cb(table.concat(cmd, ' ') .. ' failed: ' .. vim.trim(table.concat(stderr, '\n')))
      end
    end,
  })
  if not ok or job <= 0 then
    cb('cannot run ' .. cmd[1] .. ": install mm or set `cmd` in require('mm').setup()")
  end
end

-- Calls cb(err) once connected and handshaken, connecting (and starting mmd) when needed.
local function with_connection(cb)
  if conn and conn.ready then
    cb(nil)
    return
  end
  if conn then
    table.insert(conn.waiters, cb)
    return
  end
  conn = { msgid = 0, pending = {}, waiters = { cb }, ready = false, unpacker = vim.mpack.Unpacker() }
  local this = conn
  local path = M.socket_path()

  local function ready(err)
    if conn ~= this then
      return
    end
    if err then
      disconnect(err)
      return
    end
    this.ready = true
    local waiters = this.waiters
    this.waiters = {}
    for _, w in ipairs(waiters) do
      w(nil)
    end
  end

  local function attach(pipe)
    -- Before a byte is sent: the process that answers must be the user's own mmd (lua/mm/trust.lua).
    local untrusted, pid = trust.check_peer(pipe, path)
    if untrusted then
      pipe:close()
      ready(untrusted)
      return
    end
    this.pipe = pipe
    -- A process that accepts and stays silent (a daemon stopped or stuck) must not leave every request
    -- waiting without a word.
    local timer = uv.new_timer()
    timer:start(HANDSHAKE_TIMEOUT_MS, 0, vim.schedule_wrap(function()
      timer:close()
      if conn == this and not this.ready then
        ready(string.format(
          'mmd on %s%s accepted the connection but did not answer within %d s: it is stopped or stuck; '
            .. 'run `mm daemon stop` in a terminal to end it, then try again',
          path, pid and (' (pid ' .. pid .. ')') or '', HANDSHAKE_TIMEOUT_MS / 1000))
      end
    end))
    pipe:read_start(function(err, data)
      vim.schedule(function()
        if conn ~= this then
          return
        end
        if err or not data then
          disconnect('mmd closed the connection' .. (err and (' (' .. err .. ')') or ''))
        else
          on_bytes(data)
        end
      end)
    end)
    request('handshake', { protocol = PROTOCOL, client = 'nvim', version = M.version }, function(err)
      ready(err and ('handshake failed: ' .. err) or nil)
    end)
  end

  local untrusted = trust.check_dir(path:match('^(.*)/[^/]*$') or '.') or trust.check_socket_file(path)
  if untrusted then
    vim.schedule(function()
      ready(untrusted)
    end)
    return
  end
  open_pipe(path, function(err, pipe)
    if pipe then
      attach(pipe)
      return
    end
    local absent = err:match('ENOENT') or err:match('ECONNREFUSED')
    if not (absent and config.autostart) then
      ready('no daemon answers on ' .. path .. ' (' .. err .. '); start it with `mm daemon start`')
      return
    end
    start_daemon(path, function(start_err)
      if start_err then
        ready(start_err)
        return
      end
      open_pipe(path, function(err2, pipe2)
        if pipe2 then
          attach(pipe2)
        else
          ready('mmd started but ' .. path .. ' does not answer (' .. err2 .. ')')
        end
      end)
    end)
  end)
end

-- Sends a request once connected; cb(err, result).
function M.request(method, params, cb)
  with_connection(function(err)
    if err then
      cb(err, nil)
    else
      request(method, params, cb)
    end
  end)
end

-- -- the answer buffer ----------------------------------------------------------------

local function set_lines(buf, first, last, lines)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, first, last, false, lines)
  vim.bo[buf].modifiable = false
end

function M.answer_buffer()
  if answer.buf and vim.api.nvim_buf_is_valid(answer.buf) then
    return answer.buf
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, 'mm://answer')
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = 'markdown'
  vim.bo[buf].modifiable = false
  vim.api.nvim_buf_set_keymap(buf, 'n', '<C-c>', '<Cmd>MmCancel<CR>', { noremap = true, silent = true })
  answer.buf, answer.mode = buf, nil
  return buf
end

local function show_answer()
  local buf = M.answer_buffer()
  if vim.fn.bufwinid(buf) ~= -1 then
    return
  end
  local from = vim.api.nvim_get_current_win()
  vim.cmd(config.split)
  vim.api.nvim_win_set_buf(0, buf)
  vim.wo.wrap = true
  vim.api.nvim_set_current_win(from)
end

local function follow(buf)
  local last = vim.api.nvim_buf_line_count(buf)
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    if win ~= vim.api.nvim_get_current_win() then
      vim.api.nvim_win_set_cursor(win, { last, 0 })
    end
  end
end

-- Appends whole lines.
function M._line(...)
  local buf = M.answer_buffer()
  local lines = {}
  for _, text in ipairs({ ... }) do
    vim.list_extend(lines, vim.split(text, '\n', { plain = true }))
  end
  local count = vim.api.nvim_buf_line_count(buf)
  local empty = count == 1 and vim.api.nvim_buf_get_lines(buf, 0, 1, false)[1] == ''
  set_lines(buf, empty and 0 or count, -1, lines)
  answer.mode = nil
  follow(buf)
end

-- Streams text: continues the last line when it holds the same kind of text, each new line
-- starting with prefix.
local function stream(text, mode, prefix)
  if text == '' then
    return
  end
  local buf = M.answer_buffer()
  local pieces = vim.split(text, '\n', { plain = true })
  local count = vim.api.nvim_buf_line_count(buf)
  if answer.mode == mode then
    local last = vim.api.nvim_buf_get_lines(buf, count - 1, count, false)[1]
    pieces[1] = last .. pieces[1]
    for i = 2, #pieces do
      pieces[i] = prefix .. pieces[i]
    end
    set_lines(buf, count - 1, count, pieces)
  else
    for i = 1, #pieces do
      pieces[i] = prefix .. pieces[i]
    end
    set_lines(buf, count, -1, pieces)
  end
  answer.mode = mode
  follow(buf)
end

-- -- consent ------------------------------------------------------------------------

local LABELS = {
  allow_once = 'Allow once',
  allow_always = 'Always allow',
  dry_run = 'Dry run',
  deny = 'Deny',
}
local PREFIX = 'Always allow a command prefix…'

local function answer_consent(session_id, ask, choice)
  local params = { session_id = session_id, request_id = ask.request_id }
  local function send()
    M.request('consent.answer', params, function(err)
      if err and not err:match('^unknown_request') then -- unknown_request: answered elsewhere
        notify(err, vim.log.levels.ERROR)
      end
    end)
  end
  if choice == PREFIX then
    local first = present(ask.command) and vim.split(ask.command, ' ', { plain = true })[1] or ''
    vim.ui.input({ prompt = 'Command prefix to allow: ', default = first }, function(rule)
      if rule and vim.trim(rule) ~= '' then
        params.decision, params.rule = 'allow_always', vim.trim(rule)
      else
        params.decision, params.reason = 'deny', 'no prefix given'
      end
      send()
    end)
    return
  end
  local decision = nil
  for key, label in pairs(LABELS) do
    if label == choice then
      decision = key
    end
  end
  decision = decision or choice
  if decision == nil or decision == 'deny' then
    local asked = choice ~= nil
    local function deny(reason)
      params.decision = 'deny'
      if reason and reason ~= '' then
        params.reason = reason
      end
      send()
    end
    if asked then
      vim.ui.input({ prompt = 'Reason for the model (optional): ' }, deny)
    else
      deny('the user dismissed the question')
    end
    return
  end
  params.decision = decision
  send()
end

local function ask_consent(session_id, ask)
  local options = type(ask.options) == 'table' and ask.options or { 'allow_once', 'allow_always', 'deny' }
  local items = {}
  for _, option in ipairs(options) do
    table.insert(items, LABELS[option] or option)
    if option == 'allow_always' and present(ask.command) then
      table.insert(items, PREFIX)
    end
  end
  local what = inert(present(ask.echo) and ask.echo or ask.tool)
  if present(ask.sandbox) then
    what = what .. '  [sandbox: ' .. inert(ask.sandbox) .. ']'
  end
  local prompt = 'mm: ' .. inert(ask.tool) .. ' wants to run: ' .. what
  vim.ui.select(items, { prompt = prompt, kind = 'mm_consent' }, function(choice)
    answer_consent(session_id, ask, choice)
  end)
end

-- -- events -------------------------------------------------------------------------

-- The files of a files_changed event or an undo, as git status marks them: 'M a.txt, D b.txt'.
local function files_text(files)
  local marks = { added = 'A', modified = 'M', deleted = 'D', type = 'T' }
  local names = {}
  for _, f in ipairs(files or {}) do
    table.insert(names, (marks[f.change] or '?') .. ' ' .. tostring(f.path):gsub('\n', '\\n'))
  end
  return #names > 0 and table.concat(names, ', ') or 'nothing'
end

local function render(ev)
  local d = ev.data or {}
  local kind = ev.kind
  if kind == 'text' then
    stream(d.text or '', 'text', '')
  elseif kind == 'tool_call' then
    M._line('● ' .. (present(d.echo) and d.echo or d.name))
  elseif kind == 'tool_output' then
    stream(d.text or '', 'output', '  │ ')
  elseif kind == 'tool_result' then
    local lines = vim.split(vim.trim(present(d.content) and d.content or ''), '\n', { plain = true })
    M._line('  ' .. (d.ok and '✓ ' or '✗ ') .. (lines[#lines] or ''):sub(1, 200))
  elseif kind == 'files_changed' then
    M._line(string.format('  changed: %s (step %d: :MmUndo)', files_text(d.files), d.step or 0))
  elseif kind == 'consent_needed' then
    M._line('  ? ' .. d.tool .. ' asks for consent')
    ask_consent(ev.session_id, d)
  elseif kind == 'consent_answered' then
    local by = present(d.by) and (' by ' .. d.by) or ''
    local why = (present(d.reason) and d.reason ~= '') and (': ' .. d.reason) or ''
    M._line('  ' .. tostring(d.decision):gsub('_', ' ') .. by .. why)
  elseif kind == 'model_retry' then
    M._line(string.format('  ! model: %s; retrying in %.1f s', tostring(d.reason), tonumber(d.wait) or 0))
  elseif kind == 'warning' then
    M._line('  ! ' .. tostring(d.message))
  elseif kind == 'turn_ended' then
    local tail = present(d.error) and (': ' .. d.error) or ''
    if d.status ~= 'ok' and tail == '' and present(d.text) and d.text ~= '' then
      tail = ': ' .. d.text
    end
    M._line('— ' .. tostring(d.status) .. tail)
  end
end

function M._on_event(ev)
  if state.waiting and ev.session_id ~= state.session_id then
    table.insert(state.early, ev) -- the response of session.prompt has not named the session yet
    return
  end
  if ev.session_id ~= state.session_id or (ev.seq or 0) <= state.after_seq then
    return
  end
  render(ev)
  if ev.kind == 'turn_ended' then
    state.running = false
    state.last_status = ev.data.status
    state.last_error = present(ev.data.error) and ev.data.error or nil
  end
  if config.on_event then
    config.on_event(ev)
  end
end

-- -- prompts ------------------------------------------------------------------------

local function fence_for(body)
  local fence = '```'
  while body:find(fence, 1, true) do
    fence = fence .. '`'
  end
  return fence
end

-- The prompt's context: the lines of a range, else the whole current buffer. Returns (text, label)
-- or nil when there is nothing to send.
local function context(opts)
  local buf = vim.api.nvim_get_current_buf()
  if buf == answer.buf or vim.bo[buf].buftype ~= '' then
    return nil
  end
  local first, last = 1, vim.api.nvim_buf_line_count(buf)
  if opts.range and opts.range > 0 then
    first, last = opts.line1, opts.line2
  end
  local lines = vim.api.nvim_buf_get_lines(buf, first - 1, last, false)
  local body = table.concat(lines, '\n')
  if vim.trim(body) == '' then
    return nil
  end
  if #body > config.max_context_bytes then
    body = body:sub(1, config.max_context_bytes)
      .. string.format('\n[cut by mm.nvim: only the first %d bytes are included]', config.max_context_bytes)
  end
  local name = vim.fn.expand('%:.')
  name = name ~= '' and name or '[No Name]'
  local label = name
  if opts.range and opts.range > 0 then
    label = string.format('%s, lines %d-%d', name, first, last)
  end
  local fence = fence_for(body)
  return string.format('%s:\n%s%s\n%s\n%s', label, fence, vim.bo[buf].filetype, body, fence), label
end

-- Starts a turn. opts: {prompt, continue = bool, context = {text, label}|nil}.
function M.prompt(opts)
  if state.running or state.waiting then
    notify('a turn is running: wait for it or :MmCancel it', vim.log.levels.WARN)
    return
  end
  local text = opts.prompt
  if opts.context then
    text = text .. '\n\n' .. opts.context[1]
  end
  local params = { prompt = text, cwd = vim.fn.getcwd(), interactive = true, yolo = config.yolo or false }
  if config.agent then
    params.agent = vim.fn.fnamemodify(config.agent, ':p')
  end
  if config.model then
    params.model = config.model
  end
  local previous = state.session_id
  if opts.continue then
    if previous then
      params.session_id = previous
    else
      params.continue_last = true
    end
  end

  -- Taken from now: the trust question (if any) comes first, and a prompt meanwhile waits for this one.
  state.waiting, state.last_status, state.last_error = true, nil, nil
  M.trust_first(params, function()
    M._send_prompt(opts, params, previous)
  end)
end

-- -- project trust (docs/security.md#project-trust) ------------------------------------------

local TRUST, NOT_NOW = 'Trust them as they are now', 'Not now: go without them'
local TOO_LONG = 'not asked about: what it would make mm run is too long to show here whole. Read it, then '
  .. '`mm trust --yes` in its folder trusts it as it is then; meanwhile mm goes without it'

-- What trust.check found, as the question shows it: each file, then what it would make mm do, each
-- command whole (inert: escaped, never cut).
local function untrusted_text(files)
  local lines = { 'mm: these files of the project name what mm would run without asking you:' }
  for _, f in ipairs(files) do
    table.insert(lines, '  ' .. inert(f.path) .. (f.changed and ' (changed since you trusted it)' or ''))
    for _, power in ipairs(f.powers or {}) do
      table.insert(lines, '      ' .. inert(power))
    end
  end
  return table.concat(lines, '\n')
end

-- Asks about the files a request with params (cwd, agent) would go without, trusts them on yes, then
-- calls done(); with none (or no answer from the daemon: the turn says it), done() at once.
function M.trust_first(params, done, always)
  local check = {
    cwd = params.cwd,
    agent = params.agent,
    session_id = params.session_id,
    continue_last = params.continue_last,
  }
  M.request('trust.check', check, function(err, r)
    local files, too_long = {}, 0
    for _, f in ipairs(not err and r.files or {}) do
      if f.too_long then -- the person could not see all they would trust: not offered
        too_long = too_long + 1
        if always or not state.declined[f.path .. ' ' .. f.digest] then
          notify(inert(f.path) .. ' ' .. TOO_LONG, vim.log.levels.WARN)
        end
        state.declined[f.path .. ' ' .. f.digest] = true
      elseif always or not state.declined[f.path .. ' ' .. f.digest] then
        table.insert(files, f)
      end
    end
    if err or #files == 0 then
      if always and (err or too_long == 0) then
        notify(err or 'nothing here needs trust', err and vim.log.levels.ERROR or nil)
      end
      return done()
    end
    vim.ui.select({ TRUST, NOT_NOW }, { prompt = untrusted_text(files), kind = 'mm_trust' }, function(choice)
      if choice ~= TRUST then
        for _, f in ipairs(files) do
          state.declined[f.path .. ' ' .. f.digest] = true
        end
        local later = always and 'not trusted' or 'not trusted: the prompt goes without them (:MmTrust trusts them later)'
        notify(later, vim.log.levels.WARN)
        return done()
      end
      local chosen = vim.tbl_map(function(f) return { path = f.path, digest = f.digest } end, files)
      M.request('trust.add', { files = chosen }, function(add_err)
        if add_err then
          notify(add_err, vim.log.levels.ERROR)
        elseif always then
          notify('trusted; a change to them asks again')
        end
        done()
      end)
    end)
  end)
end

function M._send_prompt(opts, params, previous)
  show_answer()
  local header = '» ' .. opts.prompt
  if opts.context then
    header = header .. '\n  with ' .. opts.context[2]
  end
  M._line('', header, '')
  state.waiting, state.running, state.early = true, true, {}
  state.last_status, state.last_error = nil, nil
  M.request('session.prompt', params, function(err, result)
    state.waiting = false
    if err then
      state.running = false
      state.last_status, state.last_error = 'error', err
      M._line('— ' .. err)
      notify(err, vim.log.levels.ERROR)
      return
    end
    state.session_id, state.after_seq = result.session_id, result.after_seq
    if previous and previous ~= result.session_id then
      request('session.unsubscribe', { session_id = previous }, function() end)
    end
    local early = state.early
    state.early = {}
    for _, ev in ipairs(early) do
      M._on_event(ev)
    end
  end)
end

-- Cancels the running turn: its processes are stopped; it ends with status "cancelled".
function M.cancel()
  if not (state.running and state.session_id) then
    notify('no turn is running')
    return
  end
  M.request('session.cancel', { session_id = state.session_id }, function(err)
    if err then
      notify(err, vim.log.levels.ERROR)
    end
  end)
end

-- The :Mm and :MmContinue commands. Without arguments the prompt is asked with vim.ui.input.
function M.command(opts, continue)
  local ctx = nil
  if not opts.bang then
    local text, label = context(opts)
    if text then
      ctx = { text, label }
    end
  end
  local function go(prompt)
    if prompt and vim.trim(prompt) ~= '' then
      M.prompt({ prompt = prompt, continue = continue, context = ctx })
    end
  end
  if vim.trim(opts.args or '') ~= '' then
    go(opts.args)
  else
    vim.ui.input({ prompt = continue and 'mm (continue)> ' or 'mm> ' }, go)
  end
end

-- -- lists and completion -------------------------------------------------------------

-- The params of a method that is asked about the current directory (and agent file).
local function here()
  local params = { cwd = vim.fn.getcwd() }
  if config.agent then
    params.agent = vim.fn.fnamemodify(config.agent, ':p')
  end
  return params
end

-- :MmTrust: the question, on its own.
function M.trust_command()
  M.trust_first(here(), function() end, true)
end

-- The daemon's lists that commands complete from: the method, its params, the names in its result.
local LISTS = {
  models = {
    method = 'models.list',
    params = vim.empty_dict,
    names = function(r)
      return vim.tbl_map(function(m) return m.name end, r.models or {})
    end,
  },
  skills = {
    method = 'skills.list',
    params = here,
    names = function(r)
      return vim.tbl_map(function(s) return s.name end, r.skills or {})
    end,
  },
  mcp = {
    method = 'mcp.list',
    params = here,
    names = function(r)
      return vim.tbl_map(function(s) return s.name end, r.servers or {})
    end,
  },
}

-- The names of a list ('models', 'skills' or 'mcp'), asked of the daemon and waited for: completion
-- must answer at once, so past timeout_ms (default 3000) it is nil (connecting, or starting mmd).
function M.names(kind, timeout_ms)
  local list = LISTS[kind]
  local done, names = false, nil
  M.request(list.method, list.params(), function(err, result)
    if not err and type(result) == 'table' then
      names = list.names(result)
    end
    done = true
  end)
  vim.wait(timeout_ms or 3000, function()
    return done
  end, 10)
  return names
end

-- A command's completion: the names of *kind* that start with the word being typed; only the command's
-- first argument is completed (the rest of :MmSkill is the prompt).
function M.complete(kind, lead, cmdline)
  local before = cmdline:gsub('^%s*%S+%s*', '', 1)
  if before:find('%s') then
    return {}
  end
  return vim.tbl_filter(function(name)
    return vim.startswith(name, lead)
  end, M.names(kind) or {})
end

-- :MmModel [name]: the model of the next prompts (config.yaml's default without one).
function M.model_command(opts)
  local name = vim.trim(opts.args or '')
  if name == '' then
    notify('model: ' .. (config.model or "config.yaml's default_model"))
    return
  end
  config.model = name
  local known = M.names('models')
  if known and not vim.tbl_contains(known, name) and not name:find('/') then
    notify(name .. ' is not an alias of config.yaml: the next prompt will say which names there are',
      vim.log.levels.WARN)
  end
  notify('model: ' .. name)
end

-- :MmSkill name [prompt]: a prompt that asks for that skill, as /name does in Claude Code.
function M.skill_command(opts)
  local name, rest = (opts.args or ''):match('^%s*(%S+)%s*(.-)%s*$')
  local known = M.names('skills')
  if known and not vim.tbl_contains(known, name) then
    local listed = #known > 0 and table.concat(known, ', ') or 'none (`mm skills list` says where mm looks)'
    notify('no skill named ' .. tostring(name) .. ' here; the skills: ' .. listed, vim.log.levels.ERROR)
    return
  end
  local ask = string.format('Use the skill %s: read it with read_skill first, then follow it.', name)
  opts = vim.tbl_extend('force', opts, { args = rest ~= '' and (rest .. '\n\n' .. ask) or ask })
  M.command(opts, false)
end

-- :MmMcp [name]: the MCP servers configured here and their state, or the tools one of them offers.
function M.mcp_command(opts)
  local name = vim.trim(opts.args or '')
  if name == '' then
    M.request('mcp.list', here(), function(err, r)
      if err then
        return notify(err, vim.log.levels.ERROR)
      end
      local lines = {}
      for _, s in ipairs(r.servers or {}) do
        table.insert(lines, string.format('%s: %s (%s %s)', s.name, s.state, s.transport, s.target))
      end
      notify(#lines > 0 and table.concat(lines, '\n') or 'no MCP servers are configured here')
    end)
    return
  end
  M.request('mcp.test', vim.tbl_extend('force', here(), { name = name }), function(err, r)
    if err then
      return notify(err, vim.log.levels.ERROR)
    end
    if not r.ok then
      return notify(name .. ': ' .. tostring(r.error), vim.log.levels.ERROR)
    end
    local names = vim.tbl_map(function(t) return t.name end, r.tools or {})
    notify(string.format('%s: %d tools, ~%d tokens a request: %s', name, #names, r.tokens or 0,
      table.concat(names, ', ')))
  end)
end

-- -- undo and diff ----------------------------------------------------------------------

-- The session :MmDiff and :MmUndo are about: the one shown here, else the newest of this directory.
local function with_session(cb)
  if state.session_id then
    return cb(state.session_id)
  end
  M.request('session.list', { cwd = vim.fn.getcwd(), limit = 1 }, function(err, r)
    if err then
      return notify(err, vim.log.levels.ERROR)
    end
    local row = (r.sessions or {})[1]
    if not row then
      return notify('no session in ' .. vim.fn.getcwd() .. ': nothing has changed a file yet', vim.log.levels.WARN)
    end
    cb(row.id)
  end)
end

-- The STEP argument of :MmDiff and :MmUndo: nil when none; false (after saying so) when not a number.
local function step_arg(opts)
  local arg = vim.trim(opts.args or '')
  if arg == '' then
    return nil
  end
  local n = tonumber(arg)
  if not n or n < 1 or n % 1 ~= 0 then
    notify(arg .. ' is not a step number: :MmDiff lists the steps (1, 2, …)', vim.log.levels.ERROR)
    return false
  end
  return n
end

-- The mm://diff buffer, made once and reused: the diff of the session or of one step.
function M.diff_buffer()
  local buf = vim.fn.bufnr('mm://diff')
  if buf ~= -1 and vim.api.nvim_buf_is_valid(buf) then
    return buf
  end
  buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, 'mm://diff')
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = 'diff'
  vim.bo[buf].modifiable = false
  return buf
end

local function show_diff(r, step)
  local lines = {}
  for _, s in ipairs(r.steps or {}) do
    if not step or s.step == step then
      local what = s.tool == 'undo' and s.echo or (s.tool .. ': ' .. s.echo)
      table.insert(lines, string.format('# step %d  %s  (%s)', s.step, what:gsub('\n', ' '), files_text(s.files)))
    end
  end
  table.insert(lines, '')
  vim.list_extend(lines, vim.split(r.diff or '', '\n', { plain = true }))
  if r.truncated then
    table.insert(lines, '# cut at 4 MiB: mm diff > file.patch has it whole')
  end
  local buf = M.diff_buffer()
  set_lines(buf, 0, -1, lines)
  if vim.fn.bufwinid(buf) == -1 then
    vim.cmd(config.split)
    vim.api.nvim_win_set_buf(0, buf)
  end
end

-- :MmDiff [step]: what the session's steps (or one step) changed, in the mm://diff buffer.
function M.diff_command(opts)
  local step = step_arg(opts)
  if step == false then
    return
  end
  with_session(function(session_id)
    M.request('session.diff', { session_id = session_id, step = step }, function(err, r)
      if err then
        return notify(err, vim.log.levels.ERROR)
      end
      show_diff(r, step)
    end)
  end)
end

-- :MmUndo[!] [step]: take back the last step (or steps STEP on); ! overwrites files changed since.
function M.undo_command(opts)
  local step = step_arg(opts)
  if step == false then
    return
  end
  with_session(function(session_id)
    local params = { session_id = session_id, to_step = step, force = opts.bang == true }
    M.request('session.undo', params, function(err, r)
      if err then
        return notify(err, vim.log.levels.ERROR)
      end
      if not present(r.step) then
        return notify('nothing to restore: the files are already as they were before step ' .. tostring(r.undone))
      end
      vim.cmd('checktime') -- buffers of restored files are read again
      notify(string.format('restored to before step %d: %s (this undo is step %d: :MmUndo puts the files back)',
        r.undone, files_text(r.files), r.step))
    end)
  end)
end

-- What the plugin knows, for statuslines and tests.
function M.status()
  return {
    connected = conn ~= nil and conn.ready,
    session_id = state.session_id,
    running = state.running,
    last_status = state.last_status,
    last_error = state.last_error,
  }
end

-- Closes the connection (mmd keeps running, and so do turns started here).
function M.disconnect()
  disconnect('disconnected')
end

return M
