"""The daemon's SQLite store: sessions, their events and messages, and the consent ledger.

One file, opened by the daemon only, through plain synchronous ``sqlite3``:
each call is short, so the daemon makes it from its trio thread. Every write
method commits before it returns, so a crash, even ``kill -9``, loses at most
the write in progress. The journal is WAL with ``synchronous=NORMAL``: a
committed transaction survives the process dying; only a power cut can undo
the last few commits, and never corrupts the file.

The schema is versioned with ``PRAGMA user_version``: ``_MIGRATIONS[i]``
takes the file from version ``i`` to ``i + 1``. Add tables by appending a
migration, never by editing one that has shipped.
"""

from __future__ import annotations

import errno
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import msgspec

from mmd import paths
from mmd.models.base import Message
from mmd.rpc.messages import escaped, packed
from mmd.rpc.methods import Event

ConsentKind = Literal["tool", "exact", "prefix", "path"]
ConsentScope = Literal["session", "project", "global"]
Decision = Literal["allow", "deny"]

# Characters that let one bash command line run, feed or substitute another.
# A command holding any of them never matches a prefix rule.
SHELL_CONTROL = frozenset(";&|<>`$()\n\r")
# Milliseconds a statement waits for a lock held by another connection
# (a `sqlite3` shell or a backup reading the file), before failing.
_BUSY_TIMEOUT_MS = 5000
# Longest session title kept; the listing shows one line per session.
_TITLE_MAX = 200
# Sessions named when a prefix is ambiguous; more are summarised as "…".
_AMBIGUOUS_SHOWN = 5

# sqlite3 binds int, float, str and bytearray as they are, but looks for an adapter for any other value,
# bytes included: finding none, it raised and cleared an AttributeError on its protocol (a formatted
# message each time), ~1,500 instructions for every blob bound, five a tool call (each event's and
# message's data). An adapter for bytes that is bytes itself (``bytes(b)`` is ``b``) is found at once and
# binds the same BLOB. It is the process's own table: this module is the daemon's only user of sqlite3.
sqlite3.register_adapter(bytes, bytes)

# Sessions' next event and message numbers the store keeps (two entries a session): the sessions a
# daemon writes at once are far fewer; one forgotten costs a SELECT at its next write.
NUMBERS_KEPT = 1024

# Bytes of stored events in one page of ``session.show``: a frame well within the 16 MiB a client reads.
EVENTS_PAGE_BYTES = 4 * 1024 * 1024

_MIGRATIONS = [
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        cwd TEXT NOT NULL,
        agent TEXT,
        model TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        turns INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX sessions_by_updated ON sessions (updated);
    CREATE INDEX sessions_by_cwd ON sessions (cwd, updated);
    CREATE TABLE events (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        ts REAL NOT NULL,
        kind TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (session_id, seq)
    ) WITHOUT ROWID;
    CREATE TABLE messages (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        role TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (session_id, idx)
    ) WITHOUT ROWID;
    CREATE TABLE consents (
        id INTEGER PRIMARY KEY,
        tool TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('tool', 'exact', 'prefix')),
        rule TEXT,
        scope TEXT NOT NULL CHECK (scope IN ('session', 'project', 'global')),
        scope_key TEXT NOT NULL DEFAULT '',
        decision TEXT NOT NULL DEFAULT 'allow' CHECK (decision IN ('allow', 'deny')),
        created REAL NOT NULL,
        origin TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX consents_by_tool ON consents (tool);
    """,
    # 2: idempotent results of write calls, and tool-selection telemetry.
    """
    CREATE TABLE idempotency (
        key TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        result BLOB NOT NULL,
        created REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE tool_calls (
        id INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        ts REAL NOT NULL,
        tool TEXT NOT NULL,
        valid INTEGER NOT NULL,
        error TEXT,
        retry INTEGER NOT NULL DEFAULT 0,
        recovered INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX tool_calls_by_tool ON tool_calls (tool);
    """,
    # 3: consent rules of kind 'path' (a folder the file tools may touch outside the project).
    # SQLite cannot change a CHECK constraint in place: the table is rebuilt, rows and ids kept.
    """
    CREATE TABLE consents_new (
        id INTEGER PRIMARY KEY,
        tool TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('tool', 'exact', 'prefix', 'path')),
        rule TEXT,
        scope TEXT NOT NULL CHECK (scope IN ('session', 'project', 'global')),
        scope_key TEXT NOT NULL DEFAULT '',
        decision TEXT NOT NULL DEFAULT 'allow' CHECK (decision IN ('allow', 'deny')),
        created REAL NOT NULL,
        origin TEXT NOT NULL DEFAULT ''
    );
    INSERT INTO consents_new SELECT id, tool, kind, rule, scope, scope_key, decision, created, origin
        FROM consents;
    DROP TABLE consents;
    ALTER TABLE consents_new RENAME TO consents;
    CREATE INDEX consents_by_tool ON consents (tool);
    """,
    # 4: checkpoints of the working tree around each write step (mmd/undo): `mm diff`, `mm undo`.
    """
    CREATE TABLE checkpoints (
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        step INTEGER NOT NULL,
        call_id TEXT,
        tool TEXT NOT NULL,
        echo TEXT NOT NULL DEFAULT '',
        project TEXT NOT NULL,
        before TEXT NOT NULL,
        after TEXT NOT NULL,
        files BLOB NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY (session_id, step)
    ) WITHOUT ROWID;
    """,
    # 5: the project files you trusted (mm trust), by absolute path, as the SHA-256 of their text then.
    """
    CREATE TABLE trusted_files (
        path TEXT PRIMARY KEY,
        digest TEXT NOT NULL,
        trusted REAL NOT NULL
    ) WITHOUT ROWID;
    """,
]

_CHECKPOINT_COLUMNS = "session_id, step, call_id, tool, echo, project, before, after, files, ts"
_SESSION_COLUMNS = "id, created, updated, cwd, agent, model, title, turns"
_CONSENT_COLUMNS = "id, tool, kind, rule, scope, scope_key, decision, created, origin"
_message_decoder = msgspec.msgpack.Decoder(Message)


class StoreError(Exception):
    """The store cannot be used: unreadable file, or a schema newer than this mm."""


# Why a write failed, for a person: SQLite's primary result codes and the system's errors that mean the disk
# or another program, not mm, is in the way. (SQLite reports ENOSPC as SQLITE_FULL, a quota used up as an
# I/O error of its write.)
_SQLITE_CAUSES = {
    13: "full",  # SQLITE_FULL
    10: "io",  # SQLITE_IOERR, any of its extended codes
    8: "readonly",  # SQLITE_READONLY
    14: "cantopen",  # SQLITE_CANTOPEN: its WAL or shared-memory file
    5: "busy",  # SQLITE_BUSY: another connection held the write lock past the busy timeout
    6: "busy",  # SQLITE_LOCKED
}
_ERRNO_CAUSES = {
    errno.ENOSPC: "full",
    errno.EDQUOT: "quota",
    errno.EFBIG: "fsize",
    errno.EROFS: "readonly",
    errno.EACCES: "readonly",
    errno.EIO: "io",
}
_CAUSES = {
    "full": ("the disk is full", "free space on it (`df -h {folder}`)"),
    "quota": ("your disk quota is used up", "free some of it (`quota -s`)"),
    "fsize": ("a file reached this process's size limit", "raise `ulimit -f` for mmd and restart it"),
    "readonly": ("its file system is read-only, or its permissions forbid it", "make {folder} writable"),
    "io": ("the disk reported an I/O error", "check the disk (`dmesg`)"),
    "cantopen": (
        "a file beside it (its -wal or -shm) cannot be opened",
        "check that {folder} is yours and writable",
    ),
    "busy": (
        "another program holds its write lock",
        "close it (a `sqlite3 {path}` shell in a transaction?)",
    ),
}


def unwritable_cause(exc: BaseException) -> str | None:
    """The cause of a failed write, when the disk or another program is to blame and not mm: a key of
    ``_CAUSES``, or None."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return None if code is None else _SQLITE_CAUSES.get(code & 0xFF)
    if isinstance(exc, OSError):
        return _ERRNO_CAUSES.get(exc.errno or 0)
    return None


class NotFound(StoreError, LookupError):
    """No session has the id or prefix asked for. The message says what to run next."""


class Ambiguous(StoreError, LookupError):
    """A session prefix matches several sessions. The message names them."""


class SessionRow(msgspec.Struct, kw_only=True):
    id: str  # 12 lowercase hex characters
    created: float  # time.time() at creation
    updated: float  # time.time() of the last touch_session
    cwd: str
    agent: str | None  # agent file path, or None for the defaults
    model: str
    title: str  # first line of the first prompt; "" until set_title
    turns: int  # user messages appended so far


class CheckpointRow(msgspec.Struct, kw_only=True):
    """One step that may have written: the working tree's git trees before and after it."""

    session_id: str
    step: int  # 1 for the session's first checkpointed call, then 2, 3...
    call_id: str | None  # the tool call; None for an undo
    tool: str  # the tool's name, or "undo"
    echo: str  # the call's one line for people
    project: str  # the working tree the trees are of
    before: str  # tree id before the step
    after: str  # tree id after it
    files: list[dict[str, str]]  # [{path, change}] the step changed, for people (paths decoded)
    ts: float


class ConsentRow(msgspec.Struct, kw_only=True):
    id: int
    tool: str
    kind: ConsentKind
    rule: str | None  # the command or prefix; None for kind "tool"
    scope: ConsentScope
    scope_key: str  # session id, absolute project dir, or "" for global
    decision: Decision
    created: float
    origin: str  # which client answered, e.g. "mm chat pid 123"


def command_matches(kind: str, rule: str | None, command: str | None) -> bool:
    """Whether a consent rule of ``kind`` with ``rule`` covers ``command``.

    ``tool`` covers every call of the tool. ``exact`` covers the command equal
    to ``rule``. ``prefix`` covers ``rule`` itself and ``rule`` followed by a
    space and arguments, but only when the command holds none of
    :data:`SHELL_CONTROL`: ``git status`` must never approve
    ``git status; rm -rf ~``. An empty prefix covers nothing. ``path`` covers
    the absolute, resolved path ``command`` when it is ``rule`` or inside it
    (``/etc`` covers ``/etc/passwd``, never ``/etcetera``).

    Errors: none; an unknown kind covers nothing.
    """
    if kind == "tool":
        return True
    if command is None or rule is None:
        return False
    if kind == "exact":
        return command == rule
    if kind == "path":
        return os.path.isabs(command) and os.path.isabs(rule) and _inside(command, rule)
    if kind != "prefix":
        return False
    prefix = rule.strip()
    if not prefix or not SHELL_CONTROL.isdisjoint(command):
        return False
    return command == prefix or command.startswith(prefix + " ")


def _inside(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _first_line(text: str) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:_TITLE_MAX]


class Batch:
    """The block of :meth:`Store.batch` (a class, not a generator: it runs twice a tool call)."""

    __slots__ = ("_opened", "_store")

    def __init__(self, store: Store) -> None:
        self._store = store
        self._opened = False

    def __enter__(self) -> None:
        store = self._store
        if store._batched:  # joins the open one
            return
        store._conn.execute("BEGIN IMMEDIATE")
        store._batched = self._opened = True

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if not self._opened:
            return
        store, failed = self._store, kind is not None
        try:
            if not failed:
                store._conn.execute("COMMIT")
        except BaseException:
            failed = True
            raise
        finally:
            if failed:
                if store._conn.in_transaction:  # a failed COMMIT leaves it open
                    store._conn.execute("ROLLBACK")
                # The numbers taken within were rolled back: each is read again from the rows at its next
                # use. (A copy of every session's numbers, kept to restore, was made at every batch, two a
                # tool call, and grew with every session the daemon had written since it started.)
                store._next.clear()
            store._batched = False


class Store:
    """The open store. Use :meth:`open`; close it, or use it as a context manager.

    Not thread-safe: make every call from the thread that opened it. Besides
    the errors each method names, any call may raise sqlite3.Error when the
    disk fails (full, I/O error); a write is then rolled back whole.
    """

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self._conn = conn
        self.path = path
        # The next event seq and message index of each session written here: the daemon is the
        # store's one writer, so two SELECTs per write (the session's existence, the last number)
        # are needed once per session. A number another writer took meanwhile is found by the
        # primary key, and the write is made again with the number read afresh. NUMBERS_KEPT at most
        # (the oldest-made forgotten first, read again if its session writes again): one entry for each
        # session written since the daemon started would grow for as long as it runs.
        self._next: dict[tuple[str, str], int] = {}
        self._batched = False  # a batch() transaction is open: writes join it

    @classmethod
    def open(cls, path: Path | None = None) -> Store:
        """Open (creating if needed) the store at ``path``, default ``state_dir()/mm.db``.

        A missing parent directory is created with mode 0700 and a new file
        with mode 0600; pending migrations run before this returns.

        Errors: StoreError if the file cannot be opened, is not a database, or
        was written by a newer mm.
        """
        path = path if path is not None else paths.state_dir() / "mm.db"
        try:
            _create_private(path)
            conn = sqlite3.connect(path, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open the store {path}: {e}") from e
        store = cls(conn, path)
        try:
            store._configure()
            store._migrate()
        except BaseException as e:
            conn.close()
            if (told := store.unwritable(e.__cause__ or e)) is not None:  # a full disk, not a damaged file
                raise StoreError(told) from e
            raise
        return store

    def close(self) -> None:
        """Close the file. Calling it again does nothing; any other call afterwards fails."""
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _configure(self) -> None:
        try:
            mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        except sqlite3.DatabaseError as e:
            raise StoreError(
                f"cannot use the store {self.path}: {e} (if it is not an SQLite file, move it away and restart mmd)"
            ) from e
        if mode != "wal":
            raise StoreError(f"{self.path}: cannot switch to WAL mode (got {mode!r})")

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(_MIGRATIONS):
            raise StoreError(
                f"{self.path} has schema version {version}, newer than this mm knows "
                f"({len(_MIGRATIONS)}); upgrade mm"
            )
        for number in range(version, len(_MIGRATIONS)):
            script = f"BEGIN IMMEDIATE;\n{_MIGRATIONS[number]}\nPRAGMA user_version = {number + 1};\nCOMMIT;"
            try:
                self._conn.executescript(script)
            except BaseException as e:
                if self._conn.in_transaction:
                    self._conn.rollback()
                if isinstance(e, sqlite3.Error):
                    raise StoreError(f"{self.path}: migrating to schema {number + 1} failed: {e}") from e
                raise

    def unwritable(self, exc: BaseException) -> str | None:
        """What to tell a person when *exc*, raised by a write to this store, was the disk's or another
        program's doing (full, read-only, failing, locked): what happened and what to do; None for anything
        else. Every write is rolled back whole (Store's docstring): what was committed before is kept."""
        cause = unwritable_cause(exc)
        if cause is None or (isinstance(exc, OSError) and not self._holds(exc.filename)):
            return None  # (an OSError of a file elsewhere, a project's, is no news of the store's disk)
        what, todo = _CAUSES[cause]
        folder = self.path.parent
        return (
            f"the store {self.path} could not be written: {what}; {todo.format(folder=folder, path=self.path)}, "
            "then try again (what was saved before is kept)"
        )

    def _holds(self, filename: object) -> bool:
        """Whether *filename* (an OSError's) is in the store's folder."""
        if not isinstance(filename, str | bytes):
            return False
        name = os.path.abspath(os.fsdecode(filename))
        return os.path.commonpath([name, str(self.path.parent)]) == str(self.path.parent)

    def batch(self) -> Batch:
        """One transaction for the writes made within (``with store.batch():``): each runs (and fails) as it
        is made, and all are committed together as the block ends, or rolled back if it raises. A commit
        costs more than the insert it ends (locks and the WAL's frames): a session's event and the message
        or record written with it share one. A block within a block joins it.

        The block must not await: the connection is the daemon's, and another task's writes made meanwhile
        would join the transaction (committed or rolled back with it, their events sent before it commits).

        Errors: sqlite3.Error from BEGIN or COMMIT; whatever the block raises, after the rollback.
        """
        return Batch(self)

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so reads that decide a
        # write (the next seq, say) cannot race another writer. Within a batch(), its transaction.
        if self._batched:
            yield self._conn
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:  # a failed COMMIT leaves it open
                self._conn.execute("ROLLBACK")
            raise

    # The first number of each numbered table, and the query of the next one.
    _FIRST = {"events": 1, "messages": 0}
    _LAST = {
        "events": "SELECT max(seq) FROM events WHERE session_id = ?",
        "messages": "SELECT max(idx) FROM messages WHERE session_id = ?",
    }

    def _numbered(
        self,
        session_id: str,
        table: str,
        insert: Callable[[sqlite3.Connection, int], None],
        *,
        one_statement: bool = False,
    ) -> int:
        """Write the session's next row of *table* by ``insert(db, number)``, in one transaction; its number.

        ``one_statement``: *insert* executes one statement. Once the number is known, that statement
        then runs on its own, which SQLite commits as it ends (the connection is in autocommit mode):
        the same single transaction, without the two round trips of BEGIN and COMMIT. Within a
        :meth:`batch`, the batch's transaction.
        """
        key = (session_id, table)
        for fresh in (False, True):
            number = None if fresh else self._next.get(key)
            try:
                if number is not None and one_statement:
                    insert(self._conn, number)
                    self._next[key] = number + 1
                    return number
                with self._write() as db:
                    if number is None:
                        self._require_session(session_id)
                        last = db.execute(self._LAST[table], (session_id,)).fetchone()[0]
                        number = self._FIRST[table] if last is None else last + 1
                    insert(db, number)
            except sqlite3.IntegrityError:
                self._next.pop(key, None)
                if fresh:
                    raise
                continue
            self._keep_next(key, number + 1)
            return number
        raise AssertionError("unreachable")

    def _keep_next(self, key: tuple[str, str], number: int) -> None:
        if key not in self._next and len(self._next) >= NUMBERS_KEPT:
            del self._next[next(iter(self._next))]  # the oldest-made
        self._next[key] = number

    def _require_session(self, session_id: str) -> None:
        if self._conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise NotFound(f"no session {session_id}; run `mm sessions list`")

    # -- sessions -----------------------------------------------------------

    def create_session(self, *, cwd: str, agent: str | None, model: str) -> SessionRow:
        """Create a session with a new random id, no title and no turns.

        Errors: none of its own.
        """
        now = time.time()
        while True:
            session_id = secrets.token_hex(6)
            try:
                with self._write() as db:
                    db.execute(
                        "INSERT INTO sessions (id, created, updated, cwd, agent, model) VALUES (?, ?, ?, ?, ?, ?)",
                        (session_id, now, now, cwd, agent, model),
                    )
            except sqlite3.IntegrityError as e:
                if "sessions.id" in str(e):
                    continue  # the id is taken: one chance in 2**48 per session
                raise
            return SessionRow(
                id=session_id, created=now, updated=now, cwd=cwd, agent=agent, model=model, title="", turns=0
            )

    def get_session(self, session_id: str) -> SessionRow:
        """The session with exactly this id.

        Errors: NotFound.
        """
        row = self._conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise NotFound(f"no session {session_id}; run `mm sessions list`")
        return _session_row(row)

    def resolve_session(self, prefix: str) -> SessionRow:
        """The one session whose id starts with ``prefix`` (case-insensitive).

        Errors: NotFound if none matches (or the prefix is empty), Ambiguous if
        several do; both messages say what to type instead.
        """
        prefix = prefix.strip().lower()
        ids = [
            row[0]
            for row in self._conn.execute(
                "SELECT id FROM sessions WHERE substr(id, 1, ?) = ? ORDER BY updated DESC, id",
                (len(prefix), prefix),
            )
        ]
        if not prefix:
            raise NotFound("no session id given; run `mm sessions list`")
        if not ids:
            raise NotFound(f"no session matches {prefix}; run `mm sessions list`")
        if len(ids) > 1:
            shown = ", ".join(ids[:_AMBIGUOUS_SHOWN]) + (", …" if len(ids) > _AMBIGUOUS_SHOWN else "")
            raise Ambiguous(f"ambiguous: {prefix} matches {shown}; give more characters of the id")
        return self.get_session(ids[0])

    def list_sessions(self, limit: int = 20, cwd: str | None = None) -> list[SessionRow]:
        """Up to ``limit`` sessions, most recently updated first; only those of ``cwd`` if given.

        Errors: none.
        """
        where, args = ("WHERE cwd = ?", [cwd]) if cwd is not None else ("", [])
        rows = self._conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions {where} ORDER BY updated DESC, rowid DESC LIMIT ?",
            (*args, limit),
        )
        return [_session_row(row) for row in rows]

    def latest_session(self, cwd: str) -> SessionRow | None:
        """The most recently updated session of ``cwd``, or None.

        Errors: none.
        """
        rows = self.list_sessions(limit=1, cwd=cwd)
        return rows[0] if rows else None

    def touch_session(self, session_id: str) -> None:
        """Set the session's ``updated`` time to now.

        Errors: NotFound.
        """
        with self._write() as db:
            cur = db.execute("UPDATE sessions SET updated = ? WHERE id = ?", (time.time(), session_id))
            if cur.rowcount == 0:
                raise NotFound(f"no session {session_id}; run `mm sessions list`")

    def sessions_unused_since(self, before: float, limit: int) -> list[str]:
        """Up to *limit* sessions last used (``updated``) before *before*, the oldest first.

        Errors: none.
        """
        rows = self._conn.execute(
            "SELECT id FROM sessions WHERE updated < ? ORDER BY updated LIMIT ?", (before, limit)
        )
        return [session_id for (session_id,) in rows]

    def delete_sessions(self, session_ids: list[str]) -> None:
        """Delete these sessions with all that is theirs in the store (events, messages, checkpoints, stored
        results, tool-call figures, consent rules of session scope), in one transaction.

        Errors: none of its own (the disk's, as every write).
        """
        with self._write() as db:
            for session_id in session_ids:
                db.execute("DELETE FROM consents WHERE scope = 'session' AND scope_key = ?", (session_id,))
                db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        for session_id in session_ids:
            for table in self._FIRST:
                self._next.pop((session_id, table), None)

    def session_folders(self) -> list[str]:
        """The working folders of the store's sessions, each once (an index's walk).

        Errors: none.
        """
        return [cwd for (cwd,) in self._conn.execute("SELECT DISTINCT cwd FROM sessions")]

    def known_sessions(self, session_ids: list[str]) -> set[str]:
        """Those of *session_ids* that are sessions of the store.

        Errors: none.
        """
        known: set[str] = set()
        for start in range(0, len(session_ids), 500):  # SQLite's bound on a statement's parameters
            chunk = session_ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            known.update(
                r[0] for r in self._conn.execute(f"SELECT id FROM sessions WHERE id IN ({marks})", chunk)
            )
        return known

    def set_title(self, session_id: str, text: str) -> None:
        """Title the session with the first non-blank line of ``text`` (usually the first prompt).

        Errors: NotFound.
        """
        with self._write() as db:
            cur = db.execute("UPDATE sessions SET title = ? WHERE id = ?", (_first_line(text), session_id))
            if cur.rowcount == 0:
                raise NotFound(f"no session {session_id}; run `mm sessions list`")

    # -- events -------------------------------------------------------------

    def append_event(self, session_id: str, kind: str, data: dict[str, Any]) -> Event:
        """Store the session's next event and return it; its seq is the last seq plus one.

        Errors: NotFound; TypeError if ``data`` holds a value msgpack cannot encode.
        """
        try:
            blob = msgspec.msgpack.encode(data)
        except UnicodeEncodeError:  # a name that is not UTF-8: kept, and sent, escaped (messages.escaped)
            data = escaped(data)
            blob = msgspec.msgpack.encode(data)
        ts = time.time()

        def insert(db: sqlite3.Connection, seq: int) -> None:
            db.execute(
                "INSERT INTO events (session_id, seq, ts, kind, data) VALUES (?, ?, ?, ?, ?)",
                (session_id, seq, ts, kind, blob),
            )

        seq = self._numbered(session_id, "events", insert, one_statement=True)
        return Event(session_id=session_id, seq=seq, ts=ts, kind=kind, data=data)

    def events_after(self, session_id: str, after_seq: int = 0, limit: int | None = None) -> list[Event]:
        """The session's events with seq greater than ``after_seq``, oldest first, at most ``limit``.

        Errors: none; an unknown session has no events.
        """
        rows = self._conn.execute(
            "SELECT seq, ts, kind, data FROM events WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session_id, after_seq, -1 if limit is None else limit),
        )
        return [
            Event(session_id=session_id, seq=seq, ts=ts, kind=kind, data=msgspec.msgpack.decode(data))
            for seq, ts, kind, data in rows
        ]

    def events_page(
        self, session_id: str, after_seq: int = 0, max_bytes: int = EVENTS_PAGE_BYTES
    ) -> tuple[list[Event], bool]:
        """The session's events after ``after_seq``, oldest first, as many as fit *max_bytes* of stored data (one
        at least); and whether more remain.

        Errors: none; an unknown session has no events.
        """
        rows = self._conn.execute(
            "SELECT seq, ts, kind, data FROM events WHERE session_id = ? AND seq > ? ORDER BY seq",
            (session_id, after_seq),
        )
        page: list[Event] = []
        size = 0
        for seq, ts, kind, data in rows:
            size += len(data)
            if page and size > max_bytes:
                return page, True
            page.append(
                Event(session_id=session_id, seq=seq, ts=ts, kind=kind, data=msgspec.msgpack.decode(data))
            )
        return page, False

    def last_seq(self, session_id: str) -> int:
        """The seq of the session's newest event; 0 when it has none.

        Errors: none.
        """
        row = self._conn.execute("SELECT max(seq) FROM events WHERE session_id = ?", (session_id,)).fetchone()
        return row[0] or 0

    def open_turns(self) -> list[str]:
        """The sessions whose newest event is not a ``turn_ended``: a turn began and never ended.

        Every event belongs to a turn and a turn's last event is its
        ``turn_ended``, so these are the turns of a daemon that died (killed,
        crashed, power cut). One primary-key lookup per session.

        Errors: none.
        """
        rows = self._conn.execute(
            """SELECT s.id FROM sessions AS s JOIN events AS e ON e.session_id = s.id
               AND e.seq = (SELECT max(seq) FROM events WHERE session_id = s.id)
               WHERE e.kind != 'turn_ended' ORDER BY s.updated"""
        )
        return [session_id for (session_id,) in rows]

    def turn_left_open(self, session_id: str) -> bool:
        """Whether the session's newest event is not a ``turn_ended`` (:meth:`open_turns`, for one session).

        Errors: none.
        """
        row = self._conn.execute(
            "SELECT kind FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT 1", (session_id,)
        ).fetchone()
        return row is not None and row[0] != "turn_ended"

    def turn_endings(self, session_id: str, *, last: bool = False) -> list[dict[str, Any]]:
        """The data of the session's ``turn_ended`` events (status, text, error), oldest first.

        With ``last``, only the newest one (or none).

        Errors: none; an unknown session has none.
        """
        rows = self._conn.execute(
            "SELECT data FROM events WHERE session_id = ? AND kind = 'turn_ended'"
            f" ORDER BY seq {'DESC LIMIT 1' if last else ''}",
            (session_id,),
        )
        return [msgspec.msgpack.decode(data) for (data,) in rows]

    # -- messages -----------------------------------------------------------

    def append_message(self, session_id: str, msg: Message) -> int:
        """Append ``msg`` to the session's model context; return its index (0 for the first).

        A ``user`` message also counts one turn of the session.

        Errors: NotFound.
        """
        blob = packed(msg)

        def insert(db: sqlite3.Connection, idx: int) -> None:
            db.execute(
                "INSERT INTO messages (session_id, idx, role, data) VALUES (?, ?, ?, ?)",
                (session_id, idx, msg.role, blob),
            )
            if msg.role == "user":
                db.execute("UPDATE sessions SET turns = turns + 1 WHERE id = ?", (session_id,))

        idx = self._numbered(session_id, "messages", insert, one_statement=msg.role != "user")
        return idx

    def replace_messages(self, session_id: str, messages: list[Message]) -> None:
        """Make *messages* the session's whole model context, in one transaction.

        The context budget does it (mmd/turn/context.py): old tool outputs become stubs, older
        messages a summary, so that a resumed session fits the model's window. The events keep
        what was replaced; the session's turn count does not change.

        Errors: NotFound.
        """
        blobs = [(session_id, idx, m.role, packed(m)) for idx, m in enumerate(messages)]
        with self._write() as db:
            self._require_session(session_id)
            db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            db.executemany("INSERT INTO messages (session_id, idx, role, data) VALUES (?, ?, ?, ?)", blobs)
        self._keep_next((session_id, "messages"), len(messages))

    def messages(self, session_id: str) -> list[Message]:
        """The session's model context, in order.

        Errors: none; an unknown session has no messages.
        """
        rows = self._conn.execute(
            "SELECT data FROM messages WHERE session_id = ? ORDER BY idx", (session_id,)
        )
        return [_message_decoder.decode(data) for (data,) in rows]

    # -- consent ledger -----------------------------------------------------

    def add_consent(
        self,
        *,
        tool: str,
        kind: ConsentKind,
        rule: str | None,
        scope: ConsentScope,
        scope_key: str,
        origin: str,
        decision: Decision = "allow",
    ) -> ConsentRow:
        """Record a standing answer for ``tool``; :meth:`find_consent` finds it from now on.

        Errors: ValueError for a rule that could never match or would match
        too much: a ``tool`` kind with a rule, an ``exact``/``prefix`` kind
        without one, a prefix holding shell control characters, a ``path``
        kind whose rule is not an absolute path, a project
        scope whose key is not an absolute path, a session scope without an id.
        """
        _check_consent(kind, rule, scope, scope_key)
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO consents (tool, kind, rule, scope, scope_key, decision, created, origin)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (tool, kind, rule, scope, scope_key, decision, time.time(), origin),
            )
            consent_id = cur.lastrowid
        return self._consent(consent_id)

    def find_consent(
        self, *, tool: str, command: str | None, session_id: str, project: str
    ) -> ConsentRow | None:
        """The standing answer that covers this call, or None (ask the user).

        ``command`` is the bash command line, None for other tools; ``project``
        is the call's absolute project directory. A rule applies when its
        scope does (its session, a project dir equal to or above ``project``,
        or global) and :func:`command_matches` says so. A deny wins over an
        allow; among equals the newest wins.

        Errors: none.
        """
        rows = self._conn.execute(
            f"SELECT {_CONSENT_COLUMNS} FROM consents WHERE tool = ?"
            " ORDER BY decision = 'deny' DESC, id DESC",
            (tool,),
        )
        for row in map(_consent_row, rows):
            if _scope_applies(row, session_id, project) and command_matches(row.kind, row.rule, command):
                return row
        return None

    def list_consents(self, project: str | None = None) -> list[ConsentRow]:
        """All rules, oldest first; with ``project``, only those that concern it.

        Those are the global rules, the project rules of ``project``, of a
        directory above it or of one inside it, and the session rules of
        sessions started in it.

        Errors: none.
        """
        rows = list(
            map(_consent_row, self._conn.execute(f"SELECT {_CONSENT_COLUMNS} FROM consents ORDER BY id"))
        )
        if project is None:
            return rows
        sessions = {
            session_id
            for session_id, cwd in self._conn.execute("SELECT id, cwd FROM sessions")
            if _inside(cwd, project)
        }
        return [row for row in rows if _listed_for(row, project, sessions)]

    def revoke_consent(self, consent_id: int) -> bool:
        """Delete the rule ``consent_id``; False if there was none.

        Errors: none.
        """
        with self._write() as db:
            return db.execute("DELETE FROM consents WHERE id = ?", (consent_id,)).rowcount > 0

    # -- trusted project files (mmd/config/trust.py) ----------------------------

    def trusted_files(self) -> dict[str, str]:
        """Every trusted file's absolute path → the digest of its text when it was trusted.

        Errors: none.
        """
        return dict(self._conn.execute("SELECT path, digest FROM trusted_files"))

    def trusted_rows(self) -> list[tuple[str, str, float]]:
        """(path, digest, when) of every trusted file, by path.

        Errors: none.
        """
        return list(self._conn.execute("SELECT path, digest, trusted FROM trusted_files ORDER BY path"))

    def trust_files(self, files: list[tuple[str, str]]) -> None:
        """Trust each (absolute path, digest), replacing what was trusted of that path.

        Errors: none.
        """
        now = time.time()
        with self._write() as db:
            db.executemany(
                "INSERT OR REPLACE INTO trusted_files (path, digest, trusted) VALUES (?, ?, ?)",
                [(path, digest, now) for path, digest in files],
            )

    def forget_trusted(self, paths: list[str] | None) -> int:
        """Trust no longer the files at *paths* (None: every file); how many were trusted.

        Errors: none.
        """
        with self._write() as db:
            if paths is None:
                return db.execute("DELETE FROM trusted_files").rowcount
            return sum(db.execute("DELETE FROM trusted_files WHERE path = ?", (p,)).rowcount for p in paths)

    # -- idempotency ----------------------------------------------------------

    def idempotent_result(self, key: str) -> dict[str, Any] | None:
        """The stored first result of the call with this key, or None.

        Errors: none.
        """
        row = self._conn.execute("SELECT result FROM idempotency WHERE key = ?", (key,)).fetchone()
        return msgspec.msgpack.decode(row[0]) if row else None

    def save_idempotent(
        self, key: str, *, session_id: str, tool: str, arguments: str, result: dict[str, Any]
    ) -> None:
        """Keep the first result of a write call; a later call with the same key replays it.

        Errors: none (a second save of the same key keeps the first).
        """
        with self._write() as db:
            db.execute(
                "INSERT OR IGNORE INTO idempotency (key, session_id, tool, arguments, result, created)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (key, session_id, tool, arguments, packed(result), time.time()),
            )

    # -- checkpoints ----------------------------------------------------------

    def add_checkpoint(
        self,
        session_id: str,
        *,
        call_id: str | None,
        tool: str,
        echo: str,
        project: str,
        before: str,
        after: str,
        files: list[dict[str, str]],
    ) -> CheckpointRow:
        """Record the session's next step (numbered from 1) with its trees and the files it changed.

        Errors: NotFound.
        """
        now = time.time()
        with self._write() as db:
            self._require_session(session_id)
            step = db.execute(
                "SELECT coalesce(max(step), 0) + 1 FROM checkpoints WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            db.execute(
                f"INSERT INTO checkpoints ({_CHECKPOINT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    session_id,
                    step,
                    call_id,
                    tool,
                    echo,
                    project,
                    before,
                    after,
                    packed(files),
                    now,
                ),
            )
        return self.checkpoints(session_id)[-1]

    def checkpoints(self, session_id: str) -> list[CheckpointRow]:
        """The session's steps, oldest first.

        Errors: none; an unknown session has none.
        """
        rows = self._conn.execute(
            f"SELECT {_CHECKPOINT_COLUMNS} FROM checkpoints WHERE session_id = ? ORDER BY step", (session_id,)
        )
        return [_checkpoint_row(row) for row in rows]

    # -- telemetry ------------------------------------------------------------

    def record_tool_call(
        self, *, session_id: str, tool: str, valid: bool, error: str | None, retry: bool
    ) -> int:
        """One model tool call: was it valid as sent, and was it a retry after an invalid one.

        Errors: none.
        """
        cur = self._conn.execute(  # one statement: committed as it ends (autocommit)
            "INSERT INTO tool_calls (session_id, ts, tool, valid, error, retry) VALUES (?, ?, ?, ?, ?, ?)",
            (session_id, time.time(), tool, int(valid), error, int(retry)),
        )
        return int(cur.lastrowid or 0)

    def mark_recovered(self, call_row: int) -> None:
        """An invalid call was followed by a valid retry of the same tool."""
        with self._write() as db:
            db.execute("UPDATE tool_calls SET recovered = 1 WHERE id = ?", (call_row,))

    def tool_stats(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """Per tool: calls, first attempts, first-time-valid attempts, recoveries, the commonest error.

        Errors: none.
        """
        where, args = ("WHERE session_id = ?", (session_id,)) if session_id else ("", ())
        rows = self._conn.execute(
            f"""SELECT tool, COUNT(*), SUM(retry = 0), SUM(retry = 0 AND valid = 1),
                       SUM(retry = 0 AND valid = 0), SUM(recovered)
                FROM tool_calls {where} GROUP BY tool ORDER BY COUNT(*) DESC, tool""",
            args,
        ).fetchall()
        errors = self._conn.execute(
            f"""SELECT tool, error, COUNT(*) FROM tool_calls {where} {"AND" if where else "WHERE"} error IS NOT NULL
                GROUP BY tool, error ORDER BY COUNT(*) DESC""",
            args,
        ).fetchall()
        top: dict[str, str] = {}
        for tool, error, _ in errors:
            top.setdefault(tool, error)
        return [
            {
                "tool": tool,
                "calls": calls,
                "first_attempts": first,
                "first_valid": first_valid,
                "first_invalid": first_invalid,
                "recoveries": recovered or 0,
                "top_error": top.get(tool),
            }
            for tool, calls, first, first_valid, first_invalid, recovered in rows
        ]

    def _consent(self, consent_id: int | None) -> ConsentRow:
        row = self._conn.execute(f"SELECT {_CONSENT_COLUMNS} FROM consents WHERE id = ?", (consent_id,))
        return _consent_row(row.fetchone())


def _create_private(path: Path) -> None:
    if not path.parent.exists():
        path.parent.mkdir(parents=True, mode=0o700)
        os.chmod(path.parent, 0o700)  # mkdir's mode is filtered by the umask
    if not path.exists():
        # SQLite gives the -wal and -shm files the main file's permissions.
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))


def _session_row(row: tuple[Any, ...]) -> SessionRow:
    return SessionRow(**dict(zip(SessionRow.__struct_fields__, row, strict=True)))


def _checkpoint_row(row: tuple[Any, ...]) -> CheckpointRow:
    fields = dict(zip(CheckpointRow.__struct_fields__, row, strict=True))
    return CheckpointRow(**{**fields, "files": msgspec.msgpack.decode(fields["files"])})


def _consent_row(row: tuple[Any, ...]) -> ConsentRow:
    return ConsentRow(**dict(zip(ConsentRow.__struct_fields__, row, strict=True)))


def _check_consent(kind: str, rule: str | None, scope: str, scope_key: str) -> None:
    # Each refusal here is a rule that would never match or would match too much.
    if kind not in ("tool", "exact", "prefix", "path"):
        raise ValueError(f"unknown consent kind {kind!r}; expected tool, exact, prefix or path")
    if kind == "tool" and rule is not None:
        raise ValueError("a consent of kind 'tool' covers the whole tool; give rule=None")
    if kind != "tool" and not (rule and rule.strip()):
        raise ValueError(f"a consent of kind {kind!r} needs the command as rule")
    if kind == "prefix" and not SHELL_CONTROL.isdisjoint(rule or ""):
        raise ValueError(f"prefix rule {rule!r} holds shell control characters; it would never match")
    if kind == "path" and not os.path.isabs(rule or ""):
        raise ValueError(f"a path rule needs an absolute path, not {rule!r}")
    if scope not in ("session", "project", "global"):
        raise ValueError(f"unknown consent scope {scope!r}; expected session, project or global")
    if scope == "project" and not os.path.isabs(scope_key):
        raise ValueError(f"a project consent needs the absolute project dir as scope_key, not {scope_key!r}")
    if scope == "session" and not scope_key:
        raise ValueError("a session consent needs the session id as scope_key")
    if scope == "global" and scope_key:
        raise ValueError("a global consent takes scope_key ''")


def _scope_applies(row: ConsentRow, session_id: str, project: str) -> bool:
    if row.scope == "global":
        return True
    if row.scope == "session":
        return row.scope_key == session_id
    return row.scope == "project" and _inside(project, row.scope_key)


def _listed_for(row: ConsentRow, project: str, sessions: set[str]) -> bool:
    if row.scope == "session":
        return row.scope_key in sessions
    return row.scope == "global" or _inside(project, row.scope_key) or _inside(row.scope_key, project)
