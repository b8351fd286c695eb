"""The SQLite store, on real files in tmp_path."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

import mmd.store
from mmd.models.base import Message, ToolCall
from mmd.store import Ambiguous, NotFound, SessionRow, Store, StoreError, command_matches
from mmd.store.db import _MIGRATIONS


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "state" / "mm.db") as s:
        yield s


def new_session(store: Store, cwd: str = "/proj") -> SessionRow:
    return store.create_session(cwd=cwd, agent=None, model="local/m")


def test_public_surface():
    for name in mmd.store.__all__:
        assert hasattr(mmd.store, name)


def test_open_creates_private_dir_and_file_in_wal_mode(tmp_path):
    path = tmp_path / "state" / "mm.db"
    with Store.open(path):
        pass
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(_MIGRATIONS)
    finally:
        conn.close()


def test_open_defaults_to_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    with Store.open() as s:
        assert s.path == tmp_path / "mm" / "mm.db"
    assert s.path.exists()


def test_reopen_keeps_data_and_skips_migrations(tmp_path):
    path = tmp_path / "mm.db"
    with Store.open(path) as s:
        row = new_session(s)
    with Store.open(path) as s:
        assert s.get_session(row.id) == row


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "mm.db"
    Store.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(_MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(StoreError, match="upgrade mm"):
        Store.open(path)


def test_not_a_database_is_refused(tmp_path):
    path = tmp_path / "mm.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot use the store"):
        Store.open(path)


# -- sessions ---------------------------------------------------------------


def test_create_and_get_session(store):
    row = new_session(store)
    assert len(row.id) == 12 and all(c in "0123456789abcdef" for c in row.id)
    assert (row.cwd, row.agent, row.model, row.title, row.turns) == ("/proj", None, "local/m", "", 0)
    assert row.created == row.updated
    assert store.get_session(row.id) == row
    with pytest.raises(NotFound):
        store.get_session("000000000000")


def test_create_session_retries_a_taken_id(store, monkeypatch):
    ids = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr("mmd.store.db.secrets.token_hex", lambda n: next(ids))
    assert [new_session(store).id, new_session(store).id] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]


def test_set_title_keeps_first_nonblank_line(store):
    row = new_session(store)
    store.set_title(row.id, "\n  fix the build  \nthen test")
    assert store.get_session(row.id).title == "fix the build"


def test_list_and_latest_newest_first(store):
    a, b, c = new_session(store, "/a"), new_session(store, "/b"), new_session(store, "/a")
    store.touch_session(a.id)
    assert [r.id for r in store.list_sessions()] == [a.id, c.id, b.id]
    assert [r.id for r in store.list_sessions(limit=1)] == [a.id]
    assert [r.id for r in store.list_sessions(cwd="/b")] == [b.id]
    assert store.latest_session("/a").id == a.id
    assert store.latest_session("/nowhere") is None


def test_touch_unknown_session(store):
    with pytest.raises(NotFound, match="mm sessions list"):
        store.touch_session("nope")


def _insert_session(store: Store, session_id: str) -> None:
    # Ids are random; prefix tests need chosen ones.
    store._conn.execute(
        "INSERT INTO sessions (id, created, updated, cwd, model) VALUES (?, 0, 0, '/p', 'm')", (session_id,)
    )


def test_resolve_session_prefix(store):
    _insert_session(store, "abc123000000")
    _insert_session(store, "abd456000000")
    assert store.resolve_session("abc").id == "abc123000000"
    assert store.resolve_session("ABD4").id == "abd456000000"
    assert store.resolve_session("abc123000000").id == "abc123000000"
    with pytest.raises(Ambiguous, match="ambiguous: ab matches abc123000000, abd456000000"):
        store.resolve_session("ab")
    with pytest.raises(NotFound, match=r"no session matches ff; run `mm sessions list`"):
        store.resolve_session("ff")
    with pytest.raises(NotFound):
        store.resolve_session("")
    with pytest.raises(NotFound):
        store.resolve_session("%")  # no LIKE wildcards


# -- events -----------------------------------------------------------------


def test_seq_is_allocated_per_session(store):
    a, b = new_session(store), new_session(store)
    assert [store.append_event(a.id, "text", {"i": i}).seq for i in range(3)] == [1, 2, 3]
    assert store.append_event(b.id, "text", {}).seq == 1
    assert (store.last_seq(a.id), store.last_seq(b.id), store.last_seq("none")) == (3, 1, 0)


def test_events_after(store):
    row = new_session(store)
    data = {"text": "hé", "n": [1, 2.5, None], "nested": {"ok": True}, "raw": b"\x00"}
    first = store.append_event(row.id, "tool_output", data)
    for i in range(4):
        store.append_event(row.id, "text", {"i": i})
    events = store.events_after(row.id)
    assert events[0] == first and events[0].data == data
    assert [e.seq for e in store.events_after(row.id, after_seq=3)] == [4, 5]
    assert [e.seq for e in store.events_after(row.id, after_seq=1, limit=2)] == [2, 3]
    assert store.events_after(row.id, after_seq=5) == []
    assert all(e.session_id == row.id and e.ts > 0 for e in events)


def test_an_events_and_a_messages_data_are_stored_as_blobs_and_read_back_whole(store):
    # Bytes are bound through the adapter mmd.store.db registers (bytes itself, found at once where
    # sqlite3 raised and cleared an AttributeError looking for one): still BLOBs, byte for byte.
    s = store.create_session(cwd="/tmp/p", agent=None, model="m")
    data = {"text": "\x00\u2028 é", "n": [1, 2.5, None]}
    store.append_event(s.id, "text", data)
    store.append_message(s.id, Message(role="user", content="\x00 hi"))
    conn = sqlite3.connect(store.path)
    kinds = conn.execute(
        "SELECT typeof(data) FROM events UNION ALL SELECT typeof(data) FROM messages"
    ).fetchall()
    conn.close()
    assert kinds == [("blob",), ("blob",)]
    assert store.events_after(s.id)[0].data == data
    assert store.messages(s.id)[0].content == "\x00 hi"


def test_an_event_or_message_naming_a_file_that_is_not_utf8_is_stored_escaped(store):
    # os.listdir gives a Latin-1 name with surrogate escapes, which msgpack cannot encode: the warning that
    # named it was an error out of append_event, and the turn ended. Kept, and returned, escaped.
    name = os.fsdecode(b"caf\xe9/SKILL.md")
    s = new_session(store)
    event = store.append_event(s.id, "warning", {"message": f"{name}: cannot be read"})
    assert event.data == {"message": "caf\\xe9/SKILL.md: cannot be read"}
    assert store.events_after(s.id)[-1].data == event.data
    store.append_message(s.id, Message(role="tool", content=name, tool_call_id="c1"))
    assert store.messages(s.id)[-1].content == "caf\\xe9/SKILL.md"


def test_events_come_in_pages_of_a_bounded_size_that_together_hold_every_event_once(store):
    row = new_session(store)
    for i in range(10):
        store.append_event(row.id, "tool_output", {"text": "x" * (3_000 if i != 6 else 20_000)})
    pages, after, more = [], 0, True
    while more:
        page, more = store.events_page(row.id, after, max_bytes=10_000)
        pages.append([e.seq for e in page])
        after = page[-1].seq
    # Three of 3 KB fit 10 KB; the 20 KB one comes alone, never left out for being larger than a page.
    assert pages == [[1, 2, 3], [4, 5, 6], [7], [8, 9, 10]]
    assert store.events_page(row.id, 10) == ([], False)
    assert store.events_page("none") == ([], False)


def test_append_event_unknown_session(store):
    with pytest.raises(NotFound):
        store.append_event("nope", "text", {})


def test_open_turns_are_those_without_their_turn_ended(store):
    ended, open_, reopened, empty = (new_session(store) for _ in range(4))
    for row in (ended, open_, reopened):
        store.append_event(row.id, "turn_started", {"prompt": "p"})
        store.append_event(row.id, "text", {"text": "t"})
    for row in (ended, reopened):
        store.append_event(row.id, "turn_ended", {"status": "ok", "text": "t", "error": None})
    store.append_event(reopened.id, "turn_started", {"prompt": "again"})
    assert sorted(store.open_turns()) == sorted([open_.id, reopened.id])  # no events: no turn
    store.append_event(open_.id, "turn_ended", {"status": "interrupted", "text": "", "error": "e"})
    assert store.open_turns() == [reopened.id]
    assert store.turn_endings(empty.id) == [] and store.turn_endings(empty.id, last=True) == []


def test_turn_endings_oldest_first_or_the_last(store):
    row = new_session(store)
    for status in ("ok", "interrupted", "cancelled"):
        store.append_event(row.id, "turn_started", {"prompt": "p"})
        store.append_event(row.id, "turn_ended", {"status": status, "text": "", "error": None})
    assert [t["status"] for t in store.turn_endings(row.id)] == ["ok", "interrupted", "cancelled"]
    assert [t["status"] for t in store.turn_endings(row.id, last=True)] == ["cancelled"]


# -- messages ---------------------------------------------------------------


def test_messages_round_trip_with_tool_calls(store):
    row = new_session(store)
    msgs = [
        Message(role="system", content="be brief"),
        Message(role="user", content="list files"),
        Message(role="assistant", tool_calls=[ToolCall(id="c1", name="bash", arguments='{"command": "ls"}')]),
        Message(role="tool", content="a\nb", tool_call_id="c1", name="bash"),
        Message(role="user", content="thanks"),
    ]
    assert [store.append_message(row.id, m) for m in msgs] == [0, 1, 2, 3, 4]
    assert store.messages(row.id) == msgs
    assert store.get_session(row.id).turns == 2
    assert store.messages("none") == []
    with pytest.raises(NotFound):
        store.append_message("none", msgs[0])


def test_replaced_messages_are_the_whole_context_and_the_turn_count_stays(store):
    row = new_session(store)
    for text in ("one", "two", "three"):
        store.append_message(row.id, Message(role="user", content=text))
    note = Message(role="user", content="[a summary of one and two]")
    store.replace_messages(row.id, [note, Message(role="user", content="three")])
    assert [m.content for m in store.messages(row.id)] == ["[a summary of one and two]", "three"]
    assert store.get_session(row.id).turns == 3
    assert store.append_message(row.id, Message(role="assistant", content="ok")) == 2
    with pytest.raises(NotFound):
        store.replace_messages("none", [note])


# -- consents ---------------------------------------------------------------

MATCHES = [
    # kind, rule, command, matches
    ("tool", None, None, True),
    ("tool", None, "anything; at all", True),
    ("exact", "git status", "git status", True),
    ("exact", "git status", "git status -s", False),
    ("exact", "git status", None, False),
    ("prefix", "git status", "git status", True),
    ("prefix", "git status", "git status -s --short", True),
    ("prefix", "git", "gitk", False),
    ("prefix", "git status", "git statuses", False),
    ("prefix", "git status", " git status", False),
    ("prefix", "git status", None, False),
    ("prefix", "", "ls", False),
    ("prefix", "   ", "ls", False),
    # A prefix never approves a second command, a redirect or a substitution.
    ("prefix", "git status", "git status; rm -rf ~", False),
    ("prefix", "git status", "git status && rm -rf ~", False),
    ("prefix", "git status", "git status || rm -rf ~", False),
    ("prefix", "git status", "git status & rm -rf ~", False),
    ("prefix", "git status", "git status | sh", False),
    ("prefix", "git status", "git status > ~/.bashrc", False),
    ("prefix", "git status", "git status < /etc/passwd", False),
    ("prefix", "git status", "git status `rm -rf ~`", False),
    ("prefix", "git status", "git status $(rm -rf ~)", False),
    ("prefix", "git status", "git status $HOME", False),
    ("prefix", "git status", "git status (x)", False),
    ("prefix", "git status", "git status\nrm -rf ~", False),
    ("prefix", "git status", "git status\rrm -rf ~", False),
    ("prefix", "echo", "echo ok;", False),
    ("unknown", "ls", "ls", False),
    # A path rule covers the folder and what is inside it, by whole path components.
    ("path", "/etc", "/etc", True),
    ("path", "/etc", "/etc/passwd", True),
    ("path", "/etc/", "/etc/ssh/sshd_config", True),
    ("path", "/etc", "/etcetera/x", False),
    ("path", "/etc", "/", False),
    ("path", "/", "/home/me/.bash_history", True),
    ("path", "/etc", "etc/passwd", False),
    ("path", "/etc", None, False),
]


@pytest.mark.parametrize(("kind", "rule", "command", "ok"), MATCHES)
def test_command_matches(kind, rule, command, ok):
    assert command_matches(kind, rule, command) is ok


def add(store: Store, **kw):
    base = {
        "tool": "bash",
        "kind": "tool",
        "rule": None,
        "scope": "global",
        "scope_key": "",
        "origin": "test",
    }
    return store.add_consent(**{**base, **kw})


def find(
    store: Store, command: str | None = "ls", session_id: str = "s1", project: str = "/p", tool: str = "bash"
):
    return store.find_consent(tool=tool, command=command, session_id=session_id, project=project)


def test_add_consent_returns_row(store):
    row = add(
        store, kind="prefix", rule="git status", scope="project", scope_key="/p", origin="mm chat pid 1"
    )
    assert (row.tool, row.kind, row.rule, row.scope, row.scope_key) == (
        "bash",
        "prefix",
        "git status",
        "project",
        "/p",
    )
    assert (row.decision, row.origin) == ("allow", "mm chat pid 1")
    assert row.created > 0 and row.id > 0


@pytest.mark.parametrize(
    ("scope", "scope_key", "session_id", "project", "ok"),
    [
        ("global", "", "s1", "/anywhere", True),
        ("session", "s1", "s1", "/p", True),
        ("session", "s1", "s2", "/p", False),
        ("project", "/p", "s1", "/p", True),
        ("project", "/p", "s1", "/p/sub/dir", True),
        ("project", "/p/", "s1", "/p/sub", True),
        ("project", "/p", "s1", "/pq", False),
        ("project", "/p", "s1", "/", False),
        ("project", "/p/sub", "s1", "/p", False),
        ("project", "/", "s1", "/any/where", True),
    ],
)
def test_find_consent_scopes(store, scope, scope_key, session_id, project, ok):
    row = add(store, scope=scope, scope_key=scope_key)
    assert find(store, session_id=session_id, project=project) == (row if ok else None)


def test_find_consent_kinds(store):
    prefix = add(store, kind="prefix", rule="git status")
    exact = add(store, kind="exact", rule="make test; make lint")
    add(store, tool="write_file")
    assert find(store, "git status -s") == prefix
    assert find(store, "git status; rm -rf ~") is None
    assert find(store, "make test; make lint") == exact
    assert find(store, "make test") is None
    assert find(store, None, tool="write_file").tool == "write_file"
    assert find(store, None, tool="edit_file") is None


def test_find_consent_path_rules(store):
    rule = add(store, tool="outside:read", kind="path", rule="/srv/data")
    assert find(store, "/srv/data/a/b.txt", tool="outside:read") == rule
    assert find(store, "/srv/database", tool="outside:read") is None
    assert find(store, "/srv/data/a/b.txt", tool="outside:write") is None  # reads only


def test_migration_3_keeps_the_ledger_and_allows_path_rules(tmp_path):
    path = tmp_path / "mm.db"
    conn = sqlite3.connect(path)
    for number, script in enumerate(_MIGRATIONS[:2]):
        conn.executescript(f"BEGIN;{script}PRAGMA user_version = {number + 1};COMMIT;")
    conn.execute(
        "INSERT INTO consents (tool, kind, rule, scope, scope_key, created, origin)"
        " VALUES ('bash', 'exact', 'ls', 'global', '', 1.0, 'old')"
    )
    conn.commit()
    conn.close()
    with Store.open(path) as s:
        [old] = s.list_consents()
        assert (old.id, old.tool, old.rule, old.origin) == (1, "bash", "ls", "old")
        new = add(s, tool="outside:read", kind="path", rule="/srv")
        assert new.id == 2 and find(s, "/srv/x", tool="outside:read") == new


def test_deny_wins_then_newest(store):
    add(store)
    newer = add(store)
    assert find(store) == newer
    deny = add(store, kind="exact", rule="ls", decision="deny")
    add(store)
    assert find(store) == deny


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "tool", "rule": "ls"},
        {"kind": "exact", "rule": None},
        {"kind": "prefix", "rule": " "},
        {"kind": "prefix", "rule": "git status;"},
        {"kind": "glob", "rule": "*"},
        {"kind": "path", "rule": "relative/dir"},
        {"kind": "path", "rule": None},
        {"scope": "project", "scope_key": "relative/dir"},
        {"scope": "session", "scope_key": ""},
        {"scope": "global", "scope_key": "/p"},
        {"scope": "everywhere"},
    ],
)
def test_add_consent_refuses_bad_rules(store, bad):
    with pytest.raises(ValueError):
        add(store, **bad)
    assert store.list_consents() == []


def test_list_and_revoke(store):
    here = new_session(store, "/p/sub")
    elsewhere = new_session(store, "/q")
    rules = [
        add(store),
        add(store, scope="project", scope_key="/p"),
        add(store, scope="project", scope_key="/p/sub/deeper"),
        add(store, scope="project", scope_key="/q"),
        add(store, scope="session", scope_key=here.id),
        add(store, scope="session", scope_key=elsewhere.id),
    ]
    assert store.list_consents() == rules
    assert store.list_consents(project="/p/sub") == rules[:3] + rules[4:5]
    assert store.revoke_consent(rules[0].id) is True
    assert store.revoke_consent(rules[0].id) is False
    assert store.list_consents() == rules[1:]


# -- durability -------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from mmd.store import Store

    store = Store.open(Path(sys.argv[1]))
    while True:
        event = store.append_event(sys.argv[2], "text", {"text": "x" * 200})
        print(event.seq, flush=True)
    """
)


def test_kill_9_loses_nothing_committed(tmp_path):
    path = tmp_path / "mm.db"
    with Store.open(path) as s:
        session_id = new_session(s).id
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), session_id], stdout=subprocess.PIPE, text=True
    )
    printed = []
    try:
        for line in child.stdout:
            printed.append(int(line))
            if len(printed) >= 200:
                break
    finally:
        child.kill()  # SIGKILL, mid-loop
        rest = child.communicate()[0]
    # Whole lines printed after we stopped reading were committed too.
    printed += [int(line) for line in rest.splitlines(keepends=True) if line.endswith("\n")]
    assert child.returncode == -9
    assert len(printed) >= 200
    with Store.open(path) as s:
        stored = [e.seq for e in s.events_after(session_id)]
    assert set(printed) <= set(stored)
    assert stored == list(range(1, len(stored) + 1))
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def test_rows_are_msgspec_structs(store):
    row = new_session(store)
    assert msgspec.to_builtins(row)["id"] == row.id
    assert msgspec.structs.asdict(add(store))["kind"] == "tool"


def test_checkpoints_are_numbered_per_session_and_keep_their_files(store):
    one = store.create_session(cwd="/p", agent=None, model="m")
    two = store.create_session(cwd="/p", agent=None, model="m")
    files = [{"path": "a\nb.txt", "change": "added"}]
    first = store.add_checkpoint(
        one.id, call_id="c1", tool="bash", echo="$ x", project="/p", before="t0", after="t1", files=files
    )
    store.add_checkpoint(
        two.id, call_id="c9", tool="bash", echo="", project="/p", before="t0", after="t0", files=[]
    )
    second = store.add_checkpoint(
        one.id, call_id=None, tool="undo", echo="undo", project="/p", before="t1", after="t0", files=[]
    )
    assert (first.step, second.step) == (1, 2)
    assert [r.files for r in store.checkpoints(one.id)] == [files, []]
    assert [r.step for r in store.checkpoints(two.id)] == [1]


def test_numbers_stay_consecutive_when_another_writer_took_the_next(tmp_path):
    # The store remembers each session's next seq and index; a second writer on the same file
    # (never the daemon's case, but a number must never be lost or doubled) is found by the key.
    with Store.open(tmp_path / "mm.db") as one, Store.open(tmp_path / "mm.db") as two:
        _numbers_of_two_writers(one, two)


def _numbers_of_two_writers(one: Store, two: Store) -> None:
    s = one.create_session(cwd="/w", agent=None, model="m")
    assert one.append_event(s.id, "a", {}).seq == 1
    assert two.append_event(s.id, "b", {}).seq == 2
    assert one.append_event(s.id, "c", {}).seq == 3  # its remembered 2 was taken: read again
    assert [e.kind for e in one.events_after(s.id)] == ["a", "b", "c"]
    assert one.append_message(s.id, Message(role="user", content="x")) == 0
    assert two.append_message(s.id, Message(role="user", content="y")) == 1
    assert one.append_message(s.id, Message(role="assistant", content="z")) == 2
    one.replace_messages(s.id, [Message(role="user", content="summary")])
    assert one.append_message(s.id, Message(role="user", content="after")) == 1
    assert [m.content for m in two.messages(s.id)] == ["summary", "after"]
    assert one.get_session(s.id).turns == 3  # the replacement counts no turn, each user message one
    with pytest.raises(NotFound):
        one.append_event("nosuchsession", "a", {})


def test_a_numbered_row_is_committed_when_its_append_returns(tmp_path):
    # Events and non-user messages are one INSERT each, run without BEGIN/COMMIT (autocommit):
    # another connection reads each at once, and nothing is left in a transaction.
    store = Store.open(tmp_path / "mm.db")
    other = sqlite3.connect(tmp_path / "mm.db")
    try:
        s = store.create_session(cwd="/w", agent=None, model="m")
        for i in range(3):
            seq = store.append_event(s.id, "text", {"i": i}).seq
            idx = store.append_message(s.id, Message(role="assistant" if i else "user", content=str(i)))
            assert not store._conn.in_transaction
            assert other.execute("SELECT max(seq) FROM events WHERE session_id = ?", (s.id,)).fetchone() == (
                seq,
            )
            assert other.execute(
                "SELECT max(idx) FROM messages WHERE session_id = ?", (s.id,)
            ).fetchone() == (idx,)
        store.record_tool_call(session_id=s.id, tool="bash", valid=True, error=None, retry=False)
        assert other.execute("SELECT count(*) FROM tool_calls").fetchone() == (1,)
        # The session's next number is remembered; a session gone meanwhile is still NotFound.
        other.execute("PRAGMA foreign_keys=ON")
        other.execute("DELETE FROM sessions WHERE id = ?", (s.id,))
        other.commit()
        with pytest.raises(NotFound):
            store.append_event(s.id, "text", {})
        with pytest.raises(NotFound):
            store.append_message(s.id, Message(role="assistant", content="late"))
    finally:
        other.close()
        store.close()


def test_a_batch_commits_its_writes_together_or_none_of_them(tmp_path):
    # Within batch() each write runs as it is made and nothing is visible to another connection (nor
    # committed) until the block ends; a block that raises leaves nothing, and its numbers are taken again.
    store = Store.open(tmp_path / "mm.db")
    other = sqlite3.connect(tmp_path / "mm.db")

    def count(table: str) -> int:
        return other.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

    try:
        s = store.create_session(cwd="/w", agent=None, model="m")
        store.append_event(s.id, "turn_started", {})
        with store.batch():
            idx = store.append_message(s.id, Message(role="assistant", content="a"))
            seq = store.append_event(s.id, "assistant", {"text": "a"}).seq
            row = store.record_tool_call(session_id=s.id, tool="bash", valid=False, error="x", retry=False)
            with store.batch():  # joins
                store.mark_recovered(row)  # a write with a transaction of its own joins it too
            assert (count("messages"), count("events"), count("tool_calls")) == (0, 1, 0)
        assert (count("messages"), count("events"), count("tool_calls")) == (1, 2, 1)
        assert not store._conn.in_transaction
        with pytest.raises(RuntimeError), store.batch():
            store.append_message(s.id, Message(role="tool", content="lost", tool_call_id="c"))
            store.append_event(s.id, "tool_result", {})
            raise RuntimeError("the block failed")
        assert (count("messages"), count("events")) == (1, 2) and not store._conn.in_transaction
        assert store.append_event(s.id, "turn_ended", {}).seq == seq + 1  # the rolled-back number again
        assert store.append_message(s.id, Message(role="tool", content="kept", tool_call_id="c")) == idx + 1
    finally:
        other.close()
        store.close()


def test_the_numbers_kept_are_bounded_and_a_forgotten_one_is_read_again(tmp_path, monkeypatch):
    """The next event and message number of every session written since the daemon started were kept (and
    copied at every batch, twice a tool call): a daemon of many `mm -p` grew for as long as it ran. NUMBERS_KEPT
    at most now; a session whose numbers were forgotten continues where its rows end."""
    from mmd.store import db

    monkeypatch.setattr(db, "NUMBERS_KEPT", 8)
    store = Store.open(tmp_path / "mm.db")
    try:
        sessions = [store.create_session(cwd="/w", agent=None, model="m") for _ in range(20)]
        for s in sessions:
            with store.batch():
                store.append_event(s.id, "turn_started", {})
                store.append_message(s.id, Message(role="user", content="hi"))
            assert len(store._next) <= 8
        first = sessions[0].id
        assert (first, "events") not in store._next  # forgotten: the oldest made
        assert store.append_event(first, "turn_ended", {}).seq == 2
        assert store.append_message(first, Message(role="assistant", content="yes")) == 1
        assert [m.content for m in store.messages(first)] == ["hi", "yes"]
    finally:
        store.close()


def test_a_write_the_disk_refused_is_told_with_what_to_do_and_anything_else_is_not(tmp_path):
    store = Store.open(tmp_path / "mm.db")
    s = store.create_session(cwd="/p", agent=None, model="m")
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "database or disk is full"
    with pytest.raises(sqlite3.OperationalError) as full:
        store.append_event(s.id, "text", {"text": "x" * 100_000})
    told = store.unwritable(full.value)
    assert told == (
        f"the store {store.path} could not be written: the disk is full; free space on it "
        f"(`df -h {tmp_path}`), then try again (what was saved before is kept)"
    )
    store._conn.execute("PRAGMA max_page_count = 1073741823")
    store.append_event(s.id, "text", {"text": "fits again"})  # nothing was left half-done
    assert [e.data["text"] for e in store.events_after(s.id)] == ["fits again"]
    # Another program holding the write lock past the busy timeout.
    other = sqlite3.connect(tmp_path / "mm.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    store._conn.execute("PRAGMA busy_timeout = 10")
    with pytest.raises(sqlite3.OperationalError) as busy:
        store.append_event(s.id, "text", {"text": "waits"})
    assert "another program holds its write lock" in store.unwritable(busy.value)
    other.execute("ROLLBACK")
    other.close()
    beside = str(tmp_path / "mm.db-wal")
    assert "your disk quota is used up" in store.unwritable(
        OSError(errno.EDQUOT, "Disk quota exceeded", beside)
    )
    assert "read-only" in store.unwritable(OSError(errno.EROFS, "Read-only file system", beside))
    # The same errors of a file elsewhere (a project's) are no news of the store's disk.
    assert store.unwritable(OSError(errno.EROFS, "Read-only file system", "/project/a.txt")) is None
    assert store.unwritable(OSError(errno.ENOSPC, "No space left on device")) is None  # no file named
    # Not the disk's doing: a bug, told as one by the caller.
    assert store.unwritable(sqlite3.IntegrityError("UNIQUE constraint failed")) is None
    assert store.unwritable(ValueError("boom")) is None
    assert store.unwritable(OSError(errno.ENOENT, "No such file")) is None
    store.close()
