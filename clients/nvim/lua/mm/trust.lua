-- Is the daemon's socket, its folder and the process behind it the user's own? The checks the mm CLI makes
-- (mmd/rpc/trust.py, docs/security.md), made here before the plugin sends a byte.
--
-- On a shared machine another user can create /tmp/mm-<uid> before you and listen there; a command of a
-- sandboxed turn (your uid, with no_new_privs) can put a socket of its own in the temp dir. Either would
-- receive your prompts and buffers. So the folder must be yours (or root's) and writable by no one else, the
-- socket file yours, and the process that answers must run as you (SO_PEERCRED, through LuaJIT's FFI) and,
-- for a socket in a temp dir, not with no_new_privs (nor gone) unless this Neovim runs so too.
--
-- Each check returns nil, or the message that says what is wrong and what to do.

local M = {}

local uv = vim.uv or vim.loop
local band = require('bit').band

local ROOT_UID = 0
M.FIX = "or set MM_SOCKET (or XDG_RUNTIME_DIR, or socket in require('mm').setup()) to a path in a folder only you can write"

local S_IFMT, S_IFLNK, S_IFDIR = 0xF000, 0xA000, 0x4000

local function kind(st)
  return band(st.mode, S_IFMT)
end

-- The folder holding the socket: nil when it is fine or does not exist yet (`mm daemon start` makes it and
-- checks it), else why it cannot be trusted.
function M.check_dir(path)
  local me = uv.getuid()
  local link = uv.fs_lstat(path)
  if not link then
    return nil
  end
  if kind(link) == S_IFLNK and link.uid ~= me and link.uid ~= ROOT_UID then
    return string.format(
      '%s is a symbolic link made by uid %d, not you (%d): someone else created it; remove it, %s',
      path, link.uid, me, M.FIX)
  end
  local st = kind(link) == S_IFLNK and uv.fs_stat(path) or link
  if not st then
    return string.format('%s is a symbolic link to nothing; remove it, %s', path, M.FIX)
  end
  if kind(st) ~= S_IFDIR then
    return string.format('%s is not a folder; remove it, %s', path, M.FIX)
  end
  if st.uid ~= me and st.uid ~= ROOT_UID then
    return string.format('%s belongs to uid %d, not you (%d): someone else created it; remove it, %s',
      path, st.uid, me, M.FIX)
  end
  local mode = band(st.mode, 0x1FF) -- 0777
  if band(mode, 0x12) ~= 0 then -- 0022: group or others may write
    return string.format(
      '%s can be written by other users (mode %04o): anyone could put their own files or socket there; '
        .. 'make it private with `chmod 700 %s`, %s', path, mode, path, M.FIX)
  end
  return nil
end

-- The socket file: nil when it is yours or absent, else why not (a link to it may also be root's).
function M.check_socket_file(path)
  local me = uv.getuid()
  local link = uv.fs_lstat(path)
  if not link then
    return nil
  end
  local owner = link.uid
  if owner == me or owner == ROOT_UID then
    local st = uv.fs_stat(path)
    if not st then
      return nil -- a link to nothing: absent
    end
    owner = st.uid
  end
  if owner ~= me then
    return string.format('%s belongs to uid %d, not you (%d): someone else created it; remove it (`rm %s`), %s',
      path, owner, me, path, M.FIX)
  end
  return nil
end

-- SOL_SOCKET and SO_PEERCRED of Linux on this architecture (asm-generic: 1 and 17).
local function peercred_constants()
  local arch = jit and jit.arch or ''
  if arch:match('^mips') then
    return 0xffff, 18
  elseif arch:match('^ppc') then
    return 1, 21
  end
  return 1, 17
end

local ffi_ready = nil -- nil: not tried; false: no FFI (a Neovim built with PUC Lua) or not Linux

local function load_ffi()
  if ffi_ready ~= nil then
    return ffi_ready
  end
  local ok, ffi = pcall(require, 'ffi')
  if not ok or not jit or jit.os ~= 'Linux' then
    ffi_ready = false
    return false
  end
  -- Each in its own pcall: a reloaded plugin (or another one) may have declared either already.
  pcall(ffi.cdef, 'struct mm_ucred { int32_t pid; uint32_t uid; uint32_t gid; };')
  pcall(ffi.cdef, 'int getsockopt(int sockfd, int level, int optname, void *optval, uint32_t *optlen);')
  pcall(ffi.cdef, 'int close(int fd);')
  -- Under a name of its own: another plugin may have declared syscall() as variadic.
  pcall(ffi.cdef, 'long mm_syscall4(long number, long a, long b, void *c, long d) __asm__("syscall");')
  ffi_ready = ffi
  return ffi
end

-- (pid, uid) of the process at the other end of the connected pipe, from the kernel; nil, why when it
-- cannot be asked.
function M.peer_credentials(pipe)
  local ffi = load_ffi()
  if not ffi then
    return nil, 'this Neovim has no LuaJIT FFI'
  end
  local fd = pipe:fileno()
  if type(fd) ~= 'number' then
    return nil, 'the pipe has no file descriptor'
  end
  local level, option = peercred_constants()
  local cred = ffi.new('struct mm_ucred')
  local len = ffi.new('uint32_t[1]', ffi.sizeof(cred))
  if ffi.C.getsockopt(fd, level, option, cred, len) ~= 0 then
    return nil, 'getsockopt(SO_PEERCRED) failed'
  end
  return tonumber(cred.pid), tonumber(cred.uid)
end

-- Whether process *pid* ('self' for this one) runs with no_new_privs: true, false, or nil when its status cannot
-- be read (gone).
local function status_says(pid)
  local file = io.open('/proc/' .. tostring(pid) .. '/status', 'rb')
  if not file then
    return nil
  end
  local text = file:read('*a') or ''
  file:close()
  local flag = text:match('\nNoNewPrivs:%s*(%d)')
  if flag == nil then
    return nil
  end
  return flag == '1'
end

-- Whether process *pid* ('self' for this one) runs with no_new_privs; false when its status is unreadable.
function M.no_new_privs(pid)
  return status_says(pid) == true
end

-- SO_PEERPIDFD (Linux 6.5) and pidfd_send_signal's number (Linux 5.1), where LuaJIT runs with the generic
-- numbers (not MIPS: other syscall numbers).
local SO_PEERPIDFD, SYS_PIDFD_SEND_SIGNAL, ESRCH = 77, 424, 3

-- Whether the process at the other end of *pipe* (*pid*, from SO_PEERCRED: the one that listened) runs with
-- no_new_privs; nil when that cannot be told: gone (one that listened, forked and exited leaves its socket to
-- a child), or unreadable. Where the kernel gives the peer's pidfd, the status read is known to be that
-- process's: the pidfd still reaches it after the read (mmd/rpc/trust.py, peer_no_new_privs).
function M.peer_no_new_privs(pipe, pid)
  local ffi = load_ffi()
  local arch = jit and jit.arch or ''
  local pidfd = -1
  if ffi and not arch:match('^mips') then
    local fd = pipe:fileno()
    local level = peercred_constants()
    local out = ffi.new('int[1]')
    local len = ffi.new('uint32_t[1]', ffi.sizeof('int'))
    if type(fd) == 'number' and ffi.C.getsockopt(fd, level, SO_PEERPIDFD, out, len) == 0 then
      pidfd = tonumber(out[0])
    elseif ffi.errno() == ESRCH then
      return nil -- the kernel knows the pid, and that its process is gone
    end
  end
  local said = status_says(pid)
  if pidfd >= 0 then
    if said ~= nil and ffi.C.mm_syscall4(SYS_PIDFD_SEND_SIGNAL, pidfd, 0, nil, 0) ~= 0 and ffi.errno() == ESRCH then
      said = nil -- gone, reaped: the status read may be of a process that took its pid (another errno: the
      -- call is refused here, an old container's seccomp profile, and the status read stands)
    end
    ffi.C.close(pidfd)
  end
  return said
end

-- Whether *path* lies in a temp dir a sandboxed turn may write ($TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp).
function M.in_temp_dir(path)
  local real = uv.fs_realpath(path) or path
  local folders = { '/tmp', '/var/tmp', '/usr/tmp' } -- and the named ones (not ipairs over nils)
  for _, name in ipairs({ 'TMPDIR', 'TEMP', 'TMP' }) do
    local named = os.getenv(name)
    if named and named ~= '' then
      table.insert(folders, named)
    end
  end
  for _, folder in ipairs(folders) do
    local at = uv.fs_realpath(folder)
    if at and (at == '/' or real == at or real:sub(1, #at + 1) == at .. '/') then
      return true
    end
  end
  return false
end

-- The process answering on *path* through the connected *pipe*: nil when it is yours, else why not; and its
-- pid when known. Without the FFI (a Neovim built with PUC Lua) the kernel cannot be asked: the folder and
-- file checks stand alone.
function M.check_peer(pipe, path)
  local pid, uid = M.peer_credentials(pipe)
  if not pid then
    return nil, nil
  end
  local me = uv.getuid()
  if uid ~= me then
    return string.format(
      'the process answering on %s (pid %d) runs as uid %d, not you (%d): it is not your mmd, so nothing was '
        .. 'sent to it; remove %s, %s', path, pid, uid, me, path, M.FIX)
  end
  if not M.in_temp_dir(path) or M.no_new_privs('self') then
    return nil, pid
  end
  local confined = M.peer_no_new_privs(pipe, pid)
  if confined == nil then
    return string.format(
      'the process that listens on %s (pid %d) is gone or cannot be read, so it cannot be told from a command '
        .. 'of a sandboxed turn: it is not your mmd, so nothing was sent to it; remove %s, %s',
      path, pid, path, M.FIX)
  end
  if confined then
    return string.format(
      'the process answering on %s (pid %d) runs with no_new_privs, as a command of a sandboxed turn does, '
        .. 'and you do not: it is not your mmd, so nothing was sent to it; stop it (kill %d) and remove %s, %s',
      path, pid, pid, path, M.FIX)
  end
  return nil, pid
end

return M
