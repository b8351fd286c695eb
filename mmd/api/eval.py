"""The ``eval.*`` methods: check an ``mm eval`` fixture for the client, which reads no config itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import trio

from ..config.eval import ConfigError, NoFixture, fixture_file, load_fixture
from ..rpc import RPCError
from ..rpc.methods import EvalLoad
from ..rpc.results import EvalCase, EvalFixture
from ..turn import plan

if TYPE_CHECKING:
    from ..server.connection import Connection
    from ..server.daemon import Daemon


def check(path: Path) -> EvalFixture:
    """The fixture at *path* (a folder with eval.yaml, or the file), every mode's agent file checked.

    Blocking (it parses YAML): the method calls it in a worker thread.

    Errors: RPCError("config_error") naming the file, line and field; RPCError("bad_path") when *path*
    cannot be read (too long a name, a loop of links).
    """
    try:
        with plan.path_errors():
            file = fixture_file(path)
            spec = load_fixture(file)
    except (NoFixture, ConfigError) as exc:
        raise RPCError("config_error", str(exc)) from None
    return EvalFixture(
        root=str(file.parent),
        file=str(file),
        runs=spec.runs,
        modes=spec.modes,
        cases=msgspec.convert(spec.cases, list[EvalCase], from_attributes=True),
        log=spec.log,
        timeout=spec.timeout,
    )


async def load(daemon: Daemon, conn: Connection, p: EvalLoad) -> EvalFixture:
    path = Path(p.path)
    if not path.is_absolute():
        raise RPCError("invalid_params", f"path must be absolute, got {p.path!r}")
    return await trio.to_thread.run_sync(check, path)


METHODS = {
    "eval.load": (EvalLoad, load),
}
