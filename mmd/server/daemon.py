"""mmd: the long-running daemon that owns every piece of state.

It listens on one Unix socket, accepts clients of its own uid, keeps sessions
(their conversation, subscribers and running turn), the store, and the model
connections. Shutdown (SIGTERM, SIGINT, ``daemon.stop``) is graceful: running
turns are cancelled, which stops their process groups and commits their
``turn_ended`` events; clients get those events; then the store is closed.
A daemon that died instead (``kill -9``, a crash) left turns without a
``turn_ended``: the next daemon closes them as ``interrupted`` when it starts.

A session is in memory only while it is used: one without a turn, a client
or a pending ask for ``daemon.session_idle`` seconds is dropped and loaded
again from the store on demand.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import resource
import signal
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import trio

from .. import __version__, paths, procs, sandbox
from ..config import ConfigError, DaemonConfig, load_user_config
from ..config.agent import powers
from ..config.secrets import secret_variables
from ..config.trust import Trust, named_file, where
from ..local.server import LocalServers
from ..mcp.pool import McpPool
from ..procs.environ import withhold
from ..rpc import DEFAULT_MAX_FRAME, Method, RPCError, notification, trust
from ..rpc.methods import Prompt, TrustCheck
from ..store import SessionRow, Store, StoreError
from ..turn import context, plan
from ..turn.plan import TurnSetup
from ..turn.providers import Providers
from ..turn.session import COMPACTION, Session
from . import retention, transport
from .connection import READ_SIZE, Connection, Inboxes, Outboxes

log = logging.getLogger("mmd")

# Seconds the daemon waits for clients to read the last events at shutdown.
FLUSH_GRACE = 1.0
# Bounds of the pause between two looks for idle sessions (half of daemon.session_idle).
SWEEP_MIN, SWEEP_MAX = 0.1, 10.0
# Seconds between two reapings of exited orphans while no process tree stops.
REAP_INTERVAL = 30.0
# Seconds before a guardian that ended (procs/guardian.py: someone killed it) is started again.
GUARD_AGAIN = 60.0
# Clients served at once, at least and at most, whatever the open-files limit (Daemon.max_connections): a
# container's limit of 1,048,576 made a quarter of it no bound on memory.
MIN_CONNECTIONS, MAX_CONNECTIONS = 32, 1024
# Sessions started by confined clients remembered at most (Daemon.confined_sessions).
CONFINED_SESSIONS = 10_000
# accept(2) errors that mean "not now" (out of descriptors or memory), and the pause before the next try.
ACCEPT_LATER = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_RETRY = 0.1
# Seconds between two looks at the daemon's socket file (Daemon._listen).
SOCKET_CHECK = 2.0


class Daemon:
    def __init__(
        self,
        *,
        methods: Mapping[str, Method],
        socket_path: Path | None = None,
        state_dir: Path | None = None,
        config_path: Path | None = None,
        max_frame: int = DEFAULT_MAX_FRAME,
    ) -> None:
        # The RPC methods by name (mmd.api.METHODS): given, so that this package never imports the API.
        self.methods = methods
        self.socket_path = socket_path or paths.socket_path()
        self.state_dir = state_dir or paths.state_dir()
        self.store_path = self.state_dir / "mm.db"
        self.log_path = self.state_dir / "mmd.log"
        self.config_path = config_path or paths.config_dir() / "config.yaml"
        self.max_frame = max_frame
        self.connections: set[Connection] = set()
        self.outboxes = Outboxes()  # what all connections queue, bounded together
        self.inboxes = Inboxes()  # the unfinished frames all connections hold, bounded together
        # Clients served at once: a quarter of the descriptors this process may open. A process that opened
        # a thousand connections (a command of a turn may) took every descriptor: accept failed with EMFILE
        # and ended the daemon, and no call could make a pipe. Past it, a client is told and closed.
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        self.max_connections = min(MAX_CONNECTIONS, max(MIN_CONNECTIONS, soft // 4))
        self._refusing = False  # clients are refused for max_connections (said once in the log)
        # The sessions started, while this daemon runs, by a client with no_new_privs (a sandboxed command):
        # the only ones such a client may act on (refuse_confined). The CONFINED_SESSIONS started last: a
        # command may start sessions in a loop, and one forgotten is only refused to such clients.
        self.confined_sessions: dict[str, None] = {}
        self.sessions: dict[str, Session] = {}
        self.providers: Providers  # model connections, made when serving starts
        self._idle: tuple[float, float] = (-1.0, DaemonConfig().session_idle)  # (config mtime, seconds)
        self.mcp = McpPool(log_dir=self.state_dir / "mcp")  # MCP connections shared by sessions
        self.started = time.monotonic()
        self.stop_reason = ""
        self._stop = trio.Event()
        self.stopped = trio.Event()  # set when serve() has shut everything down
        self.store: Store
        self._owner = "mm"  # the tag of this daemon's children (_sweep_orphans)
        self._lock_fd: int | None = None  # mmd.sock.lock, held while serving on a socket bound here
        self._bound: tuple[int, int] | None = None  # (device, inode) of the socket file bound here
        self._root: trio.Nursery
        self._turns: trio.Nursery
        # Replaced in tests to fake another uid's connection.
        self.peer_credentials = transport.peer_credentials
        self.peer_confined = transport.peer_confined
        # Called once when a stop is requested (main.py tells systemd: STOPPING=1).
        self.on_stopping: Callable[[], object] | None = None

    # -- life cycle ---------------------------------------------------------

    async def serve(
        self,
        *,
        listen_sock: socket.socket | None = None,
        handle_signals: bool = False,
        task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Bind (unless given a listening socket), serve until stopped, shut down gracefully.

        Errors:
            transport.AlreadyRunning: another daemon owns the socket.
            trust.UnsafePath: the socket's folder, lock or file, or the state folder, is not this
            user's alone (the message says how to fix it).
        Cancellation: an outside cancel skips the graceful part but still
        stops every child process group and closes the store.
        """
        lock_fd = self._lock_fd = None
        if listen_sock is None:
            lock_fd = self._lock_fd = transport.lock_socket(self.socket_path)
        try:
            trust.ensure_private_dir(self.state_dir, fix=trust.STATE_FIX)
            # Spill files of tool calls: private like the store and the log.
            trust.ensure_private_dir(self.state_dir / "sessions", fix=trust.STATE_FIX)
            # The store before the socket: a daemon that cannot open it exits with the reason before any
            # client connects, and the client quotes that reason rather than "closed the connection".
            self.store = Store.open(self.store_path)
            if listen_sock is None:
                try:
                    listen_sock = transport.bind_unix(self.socket_path)
                except BaseException:
                    self.store.close()
                    raise
                self._bound = transport.identity(self.socket_path)
            self._sweep_orphans()
            self._close_interrupted_turns()
            self._withhold_secrets()
            try:
                await self._run(listen_sock, handle_signals, task_status)
            finally:
                procs.stop_orphans()  # the trees are stopped: what is left dropped its tag
                # No longer the reaper of this process's orphans: a process that goes on after serving (a
                # test's, which then starts an `mm` whose own daemon outlives it) would keep them as zombies.
                procs.reap_orphans()
                procs.become_subreaper(False)
                self.store.close()
                if lock_fd is not None:
                    transport.remove_socket(self.socket_path)
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
        log.info("mmd stopped (%s)", self.stop_reason or "cancelled")

    async def _run(self, listen_sock: socket.socket, handle_signals: bool, task_status: Any) -> None:
        try:
            async with trio.open_nursery() as root:
                self._root = root
                local = LocalServers(
                    root, self.state_dir, busy=lambda: any(s.running for s in self.sessions.values())
                )
                self.providers = Providers(root, local)
                await root.start(self.mcp.run)
                if handle_signals:
                    root.start_soon(self._signals)
                root.start_soon(self._listen, listen_sock)
                root.start_soon(self._unload_idle_sessions)
                root.start_soon(self._reap_orphans)
                root.start_soon(self._prune_sessions)
                root.start_soon(self._guard)
                async with trio.open_nursery() as turns:
                    self._turns = turns
                    log.info("mmd %s listening on %s (pid %d)", __version__, self.socket_path, os.getpid())
                    task_status.started(self)
                    await self._stop.wait()
                    for session in self.sessions.values():
                        session.cancel()
                for conn in list(self.connections):
                    conn.close_after_flush()
                with trio.move_on_after(FLUSH_GRACE):
                    while self.connections:
                        await trio.sleep(0.01)
                root.cancel_scope.cancel()
        finally:
            if hasattr(self, "providers"):
                await self.providers.aclose()
            self.stopped.set()

    def _sweep_orphans(self) -> None:
        # Children are tagged with an owner derived from the socket: whatever
        # still carries it now was left by a previous daemon that was killed.
        owner = self._owner = hashlib.sha256(str(self.socket_path.absolute()).encode()).hexdigest()[:12]
        swept = procs.sweep_orphans(owner)
        if swept:
            log.warning("stopped %d processes left by a previous daemon: %s", len(swept), swept)
        procs.set_owner(owner)
        # Orphaned descendants of our children come back to us, so a tree is found from its
        # root instead of by a scan of /proc per call (mmd/procs/supervisor.py).
        if not procs.become_subreaper():
            log.info("not a subreaper (the kernel refused): process trees are found by scanning /proc")

    def _withhold_secrets(self) -> None:
        # Before any child starts: the config's key variables are withheld from the first one
        # on (each prompt reads the config again and adds what it names).
        with contextlib.suppress(ConfigError):  # the first prompt reports it
            withhold(secret_variables(load_user_config(self.config_path)))

    def _close_interrupted_turns(self) -> None:
        # A turn still open in the store was running when the previous daemon died: end it
        # (its unanswered calls get a result, so the history stays valid) before anyone resumes it.
        # On a store that cannot be written (a full disk), the daemon serves all the same: such a turn is
        # closed when its session is next loaded and started (Session.settle).
        for session_id in self.store.open_turns():
            try:
                Session(self, self.store.get_session(session_id)).settle()
            except Exception as exc:
                if (reason := self.store.unwritable(exc)) is None:
                    raise
                log.error("session %s: its interrupted turn is not closed yet: %s", session_id, reason)
                continue
            log.warning("session %s: closed a turn the previous daemon left open as interrupted", session_id)

    def unwritable(self, exc: BaseException) -> str | None:
        """What to tell a client when *exc* is the store's disk (or another program) in the way: Store.unwritable."""
        return self.store.unwritable(exc)

    def refuse_stopping(self) -> None:
        """Errors: RPCError stopping once a stop was asked for: no turn starts then."""
        if self._stop.is_set():
            raise RPCError(
                "stopping",
                f"mmd is stopping ({self.stop_reason}): no turn starts now; run the command again, which "
                "starts a new daemon",
            )

    def request_stop(self, reason: str) -> None:
        log.info("stop requested: %s", reason)
        if self.on_stopping is not None and not self._stop.is_set():
            self.on_stopping()
        self.stop_reason = reason
        self._stop.set()

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                self.request_stop(signal.Signals(signum).name)

    async def _listen(self, sock: socket.socket) -> None:
        """Accept clients on *sock*. Where the daemon bound it itself (not systemd), its socket file is looked
        at every SOCKET_CHECK seconds, and bound again once it was removed (a cleaner of the temp dir) or
        replaced (a command of a sandboxed turn may write the temp dir, /tmp/mm-<uid>): else no client could
        reach the daemon again, nor stop it, until it was killed."""
        while True:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._accept, trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
                if self._lock_fd is None:  # systemd's socket (socket activation): its to keep
                    await trio.sleep_forever()
                while transport.identity(self.socket_path) == self._bound:
                    await trio.sleep(SOCKET_CHECK)
                nursery.cancel_scope.cancel()  # the old listener is closed
            sock = await self._take_back()

    async def _take_back(self) -> socket.socket:
        while True:
            assert self._lock_fd is not None  # only a socket bound here is taken back
            try:
                # The lock file went too (its folder, most likely): the lock is taken again on a new one.
                lock_path = self.socket_path.with_name(self.socket_path.name + ".lock")
                held = os.fstat(self._lock_fd)
                if transport.identity(lock_path) != (held.st_dev, held.st_ino):
                    lock_fd = transport.lock_socket(self.socket_path)
                    os.close(self._lock_fd)
                    self._lock_fd = lock_fd
                sock = transport.take_back(self.socket_path)
                self._bound = transport.identity(self.socket_path)
            except transport.AlreadyRunning as exc:  # another daemon took the place meanwhile: it is its
                log.error("%s: this daemon stops", exc)
                self.request_stop("another daemon took its socket's place")
                await trio.sleep_forever()
            except OSError as exc:
                log.warning(
                    "cannot bind %s again: %s; trying again in %g s", self.socket_path, exc, SOCKET_CHECK
                )
                await trio.sleep(SOCKET_CHECK)
                continue
            log.warning("%s was removed or replaced: bound it again", self.socket_path)
            return sock

    async def _accept(self, listener: trio.SocketListener) -> None:
        failing = False  # said once in the log, until an accept succeeds again
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in ACCEPT_LATER:
                        raise
                    # Out of descriptors or memory (this process's, or the system's): the clients already
                    # connected go on, and the next accept is tried a little later.
                    if not failing:
                        log.warning(
                            "cannot accept connections now: %s; trying again every %g s",
                            exc.strerror,
                            ACCEPT_RETRY,
                        )
                    failing = True
                    await trio.sleep(ACCEPT_RETRY)
                    continue
                failing = False
                self._root.start_soon(self._admit, stream)

    async def _admit(self, stream: trio.SocketStream) -> None:
        # One client's failure ends its connection only: an error that escaped it once ended the daemon.
        try:
            await self._serve_client(stream)
        except Exception:
            log.exception("a client connection failed; it was closed")
            with trio.CancelScope(shield=True), contextlib.suppress(Exception):
                await stream.aclose()

    async def _serve_client(self, stream: trio.SocketStream) -> None:
        pid, uid, _ = self.peer_credentials(stream.socket)
        if uid != os.getuid():
            log.warning("refused a connection from pid %d of uid %d", pid, uid)
            await self._refuse(
                stream, "peer_refused", f"this mmd serves uid {os.getuid()} only; start your own daemon"
            )
            return
        if len(self.connections) >= self.max_connections:
            if not self._refusing:  # said once, until a client is served again
                log.warning(
                    "refusing clients: %d are connected, the limit (pid %d first)", len(self.connections), pid
                )
            self._refusing = True
            await self._refuse(
                stream,
                "too_many_clients",
                f"{len(self.connections)} clients are connected to this mmd, its limit; close some (editors, "
                "mm sessions left open), or restart it with more open files allowed (ulimit -n, or "
                "LimitNOFILE= in its systemd unit): it serves a quarter of them",
            )
            return
        self._refusing = False
        # Judged once, now, of the process that connected: asked later, a process gone since (a command that
        # connected, forked and exited) could not be told from one that never was confined.
        conn = Connection(self, stream, pid, confined=self.peer_confined(stream.socket, pid))
        self.connections.add(conn)
        await conn.serve()

    async def _refuse(self, stream: trio.SocketStream, code: str, message: str) -> None:
        """Tell a client why it is not served (an ``error`` notification), then close its connection: once
        it hung up, or after a second. Closed with its handshake unread, the connection would be reset, and
        the client would read that instead of why."""
        with trio.move_on_after(1), contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(notification("error", {"code": code, "message": message}))
            await stream.send_eof()
            while await stream.receive_some(READ_SIZE):
                pass
        await stream.aclose()

    def refuse_confined(self, conn: Connection, session_id: str | None, doing: str) -> None:
        """Refuse *doing* to a client with no_new_privs (a sandboxed command, most likely) unless it is to a
        session such a client started (*session_id*; None: the daemon itself, never).

        Errors: RPCError confined_client, saying what it may not do and why.
        """
        if self.confined_out_of(conn, session_id):
            raise RPCError("confined_client", sandbox.confined_refusal(doing))

    def project_trust(self, conn: Connection, cwd: Path, named: str | None) -> Trust:
        """The trust of a request from *conn* in *cwd* (mmd/config/trust.py): the files you trusted, and the
        agent file the request names (*named*, ``--agent``) — unless *conn* runs with no_new_privs: what a
        sandboxed command names is trusted no more than what it writes."""
        return Trust(self.store.trusted_files(), named=None if conn.confined else named_file(cwd, named))

    def remember_confined(self, session_id: str) -> None:
        """*session_id* was started by a confined client: such clients may act on it (CONFINED_SESSIONS
        remembered, the oldest forgotten: a command may start sessions in a loop)."""
        self.confined_sessions[session_id] = None
        if len(self.confined_sessions) > CONFINED_SESSIONS:
            del self.confined_sessions[next(iter(self.confined_sessions))]

    def confined_out_of(self, conn: Connection, session_id: str | None) -> bool:
        """Whether *conn* runs with no_new_privs and *session_id* is no session such a client started."""
        return session_id not in self.confined_sessions and conn.confined

    def detach(self, conn: Connection) -> None:
        self.connections.discard(conn)
        for session_id in list(conn.subscriptions):
            session = self.sessions.get(session_id)
            if session is not None:
                session.unsubscribe(conn)

    # -- sessions -----------------------------------------------------------

    def session(self, session_id: str) -> Session:
        """The loaded session for an id or unique prefix (loaded now if it was not: its messages are read).

        Errors:
            RPCError("no_session"): no session matches.
        """
        row, loaded = self.find_session(session_id)
        if loaded is None:
            loaded = self.sessions[row.id] = Session(self, row)
        return loaded

    def find_session(self, session_id: str) -> tuple[SessionRow, Session | None]:
        """The row of the session for an id or unique prefix, and the session if it is loaded; nothing is
        loaded. For what only reads the store (session.show, diff, stats): a client that asked to see every
        session once loaded them all, each held until it was idle for daemon.session_idle.

        Errors:
            RPCError("no_session"): no session matches.
        """
        if (loaded := self.sessions.get(session_id)) is not None:
            return loaded.row, loaded
        try:
            row = self.store.resolve_session(session_id)
        except StoreError as exc:
            raise RPCError("no_session", str(exc)) from None
        return row, self.sessions.get(row.id)

    def _session_idle(self) -> float:
        """``daemon.session_idle`` of config.yaml, read again when the file changes."""
        try:
            mtime = self.config_path.stat().st_mtime
        except OSError:
            mtime = 0.0
        if mtime != self._idle[0]:
            try:
                seconds = load_user_config(self.config_path).daemon.session_idle
            except (ConfigError, OSError) as exc:  # the prompts that use it report it; keep the last value
                log.warning("%s", exc)  # (an OSError: a folder of it turned unreadable, a task must not end)
                seconds = self._idle[1]
            self._idle = (mtime, seconds)
        return self._idle[1]

    async def _unload_idle_sessions(self) -> None:
        # Whatever an idle session holds is in the store: Daemon.session() loads it again.
        while True:
            idle = self._session_idle()
            await trio.sleep(min(max(idle / 2, SWEEP_MIN), SWEEP_MAX))
            now = trio.current_time()
            for session_id, session in list(self.sessions.items()):
                unused = session.idle_for(now)
                if unused > 0 and unused >= idle:
                    del self.sessions[session_id]

    async def _reap_orphans(self) -> None:
        # Every stop of a process tree reaps the orphans that exited; this catches those of
        # long-lived trees (an MCP server's helper) while no call ends.
        while True:
            await trio.sleep(REAP_INTERVAL)
            try:
                procs.reap_orphans()
            except OSError as exc:  # /proc unreadable now (out of descriptors): looked at again next time
                log.warning("cannot look for orphaned processes now: %s", exc)

    async def _guard(self) -> None:
        # What a killed daemon's calls left running is stopped by its guardian (procs/guardian.py) as it dies,
        # not only by the next daemon, if one ever starts.
        # One that ends (killed by hand) is reaped, and started again a minute later.
        while True:
            try:
                code = await procs.guard(self._owner, DaemonConfig().grace)
            except OSError as exc:
                log.warning(
                    "no guardian: a killed daemon's processes are stopped by the next one only: %s", exc
                )
                return
            log.warning("the guardian ended (exit status %d); another starts in %g s", code, GUARD_AGAIN)
            await trio.sleep(GUARD_AGAIN)

    async def _prune_sessions(self) -> None:
        # Sessions unused for daemon.session_days go with their files (retention.py): a minute after the
        # start (not in the way of the first prompt), then every few hours of a daemon that runs for weeks.
        await trio.sleep(retention.FIRST_LOOK)
        while True:
            days = await trio.to_thread.run_sync(retention.session_days, self.config_path)
            try:
                if days:
                    await retention.prune(self.store, self.state_dir, days, self.sessions)
            except Exception as exc:
                if (reason := self.store.unwritable(exc)) is None:
                    raise
                log.warning("old sessions are not deleted now: %s", reason)
            await trio.sleep(retention.LOOK_EVERY)

    async def prompt(self, conn: Connection, p: Prompt) -> Session:
        """Start a turn for a ``session.prompt`` call and return its session.

        Errors:
            RPCError: bad agent file or config, no model, unknown session,
            or a turn already running in that session; stopping once the daemon stops.
        """
        self.refuse_stopping()
        session = self.resumed(p)
        if session is not None:  # `mm -c` in a sandboxed command found yours
            self.refuse_confined(conn, session.id, "continue this session")
        cwd = Path(session.row.cwd if session else p.cwd)
        agent = p.agent or (session.row.agent if session else None)
        confined = conn.confined
        # A resumed session's agent file is trusted as any other, not as one named now (config/trust.py).
        trust = self.project_trust(conn, cwd, p.agent)
        # In a worker thread: parsing a big or hostile agent file must not stall other clients.
        resolved = await trio.to_thread.run_sync(
            lambda: plan.resolve(
                cwd,
                agent=agent,
                model=p.model,
                yolo=p.yolo,
                config_path=self.config_path,
                trust=trust,
                sandbox=p.sandbox,
            )
        )
        resolved.confined_client = confined
        if p.agent and not confined:
            self._trust_named(resolved, trust)
        if session is None:
            row = self.store.create_session(
                cwd=str(cwd), agent=resolved.agent_path, model=resolved.model.label
            )
            session = self.sessions[row.id] = Session(self, row)
        else:
            session = self.session(session.id)  # the one loaded now: it may have been unloaded meanwhile
        if session.running:
            raise session.busy_error("send it again")
        session.start()  # before the awaits below: a second prompt meanwhile is "busy"
        if resolved.confined_client:
            self.remember_confined(session.id)
        try:
            setup = await self._setup(resolved, session)
            # Stopped meanwhile: the turn would start after the stop cancelled the turns (and ran to its end,
            # holding the daemon up), or find their nursery closed.
            self.refuse_stopping()
        except BaseException:
            session.abort_start()
            await self.providers.release(session.id)
            raise
        session.subscribe(conn, interactive=p.interactive)
        self._turns.start_soon(self._run_turn, session, p.prompt, setup)
        return session

    async def compact(
        self, conn: Connection, session_id: str, model: str | None
    ) -> tuple[str, dict[str, Any]]:
        """Summarise a session's conversation into one note (``session.compact``); the session id
        and the ``context_compacted`` event's data. A client with no_new_privs starts no MCP server (_setup).

        Errors: RPCError no_session, busy (a turn runs), config_error, no_model, model_error.
        """
        session = self.session(session_id)
        self.refuse_confined(conn, session.id, "compact this session")
        cwd, agent = Path(session.row.cwd), session.row.agent
        trust = self.project_trust(conn, cwd, None)
        resolved = await trio.to_thread.run_sync(
            lambda: plan.resolve(
                cwd, agent=agent, model=model, yolo=False, config_path=self.config_path, trust=trust
            )
        )
        resolved.confined_client = conn.confined
        session = self.session(session.id)  # the one loaded now
        if session.running:
            raise session.busy_error("compact it")
        session.start(COMPACTION)  # no turn may start meanwhile
        try:
            setup = await self._setup(resolved, session)
            return session.id, await context.compact(session, setup, by="user")
        finally:
            session.abort_start()
            await self.providers.release(session.id)

    def _trust_named(self, resolved: plan.Plan, trust: Trust) -> None:
        """Trust the agent file a person's prompt named (``--agent``) as it is: naming it is trusting it, and
        so ``mm -c`` of its session goes on with it while it is unchanged (mmd/config/trust.py)."""
        named, digest = resolved.agent_path, resolved.agent.digest
        if named and powers(resolved.agent) and not trust.holds(named, digest):
            self.store.trust_files([(where(named), digest)])

    def resumed(self, p: Prompt | TrustCheck) -> Session | None:
        """The session a prompt resumes (by id, or the newest of its cwd), or None for a new one.

        Errors: RPCError no_session."""
        if p.session_id:
            return self.session(p.session_id)
        if not p.continue_last:
            return None
        row = self.store.latest_session(p.cwd)
        if row is None:
            raise RPCError("no_session", f"no session to continue in {p.cwd}; start one with mm -p PROMPT")
        return self.session(row.id)

    async def _setup(self, resolved: plan.Plan, session: Session) -> TurnSetup:
        provider = await self.providers.get(resolved.model, session.id)
        budget = await self.providers.budget(resolved.model, session.id)
        mcp_tools, mcp_warnings = await self.mcp.tools(
            resolved.agent, resolved.config, confined_client=resolved.confined_client
        )
        # In a worker thread: it reads the project's skills (a cloned repository's 500 SKILL.md files took
        # the loop 115 s before their bounds), the files the system prompt names, and the sandbox's paths.
        setup = await trio.to_thread.run_sync(
            plan.assemble, resolved, provider, mcp_tools, mcp_warnings, budget
        )
        for warning in setup.warnings:
            log.warning("%s", warning)
        return setup

    def spawn(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` in the daemon's root nursery: hooks that nothing waits for (SessionEnd after the
        client left, Notification). Cancelled at shutdown, so they never hold it up; after it, not run."""
        try:
            self._root.start_soon(fn, *args)
        except (AttributeError, RuntimeError):  # not serving yet, or shutting down
            log.info("not run (the daemon is not serving): %s", getattr(fn, "__name__", fn))

    async def _run_turn(self, session: Session, prompt: str, setup: TurnSetup) -> None:
        try:
            await session.run_turn(prompt, setup)
        finally:
            await self.providers.release(session.id)
