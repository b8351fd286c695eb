"""Pieces of a daemon's work taken out, to measure what each costs (bench_cpu.py --ablate NAME).

Python imports this module at start in every process whose PYTHONPATH holds this folder; it acts only in
an mmd daemon (``--socket`` in its arguments) and only on the names in ``MM_ABLATE`` (comma-separated).
A daemon so changed breaks a guarantee on purpose: never run one but to measure it.

- ``nosql``: the rows of events, messages and tool calls are not written (their transactions neither).
- ``notranscript``: no transcript line is written for hooks.
- ``nospawnhop``: an unconfined child is started by the event loop's thread itself, not handed to the
  spawner thread (mmd/procs/spawner.py says why mm does not do that).
"""

from __future__ import annotations

import os
import sys
from typing import Any

ABLATE = {name for name in os.environ.get("MM_ABLATE", "").split(",") if name}


def _nosql() -> None:
    from mmd.store import db

    class Cursor:
        lastrowid, rowcount = 1, 1

        def fetchone(self) -> tuple[None]:
            return (None,)

    skipped = ("INSERT INTO events", "INSERT INTO messages", "INSERT INTO tool_calls", "BEGIN", "COMMIT")

    class Connection:
        def __init__(self, real: Any) -> None:
            self._real = real

        def execute(self, sql: str, params: Any = ()) -> Any:
            return Cursor() if sql.startswith(skipped) else self._real.execute(sql, params)

        def __getattr__(self, name: str) -> Any:
            return getattr(self._real, name)

        in_transaction = False

    init = db.Store.__init__

    def store_init(self: Any, conn: Any, path: Any) -> None:
        init(self, conn, path)
        self._conn = Connection(conn)

    db.Store.__init__ = store_init  # type: ignore[method-assign]


def _notranscript() -> None:
    from mmd.turn import transcript

    transcript.append = lambda *args, **kwargs: None  # type: ignore[assignment]


def _nospawnhop() -> None:
    from mmd.procs import supervisor

    hand_over = supervisor.run_spawner

    async def run_spawner(box: Any, fn: Any, *args: Any) -> Any:
        return fn(*args) if box is None else await hand_over(box, fn, *args)

    supervisor.run_spawner = run_spawner  # type: ignore[assignment]
    supervisor.own_cwd = lambda: True  # the loop's thread moves the daemon's working directory


if "--socket" in sys.argv and ABLATE:
    from mmd.deferred import defer_openssl

    defer_openssl()  # as mmd/boot.py does first: the patches import trio
    for name in sorted(ABLATE):
        {"nosql": _nosql, "notranscript": _notranscript, "nospawnhop": _nospawnhop}[name]()
