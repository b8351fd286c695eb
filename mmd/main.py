"""``mmd``: run the daemon in the foreground (clients start it detached on demand)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

import trio

from . import __version__, paths
from .api import METHODS
from .procs import cspawn, environ
from .rpc import trust, unix
from .server import sdnotify
from .server.daemon import Daemon
from .server.transport import AlreadyRunning
from .store import StoreError

# Exit status when another daemon already serves the socket: not an error.
EXIT_ALREADY_RUNNING = 0


class _Args(NamedTuple):
    socket: Path | None = None
    state_dir: Path | None = None
    config: Path | None = None
    log_level: str = "INFO"


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_FIELDS = {"--socket": "socket", "--state-dir": "state_dir", "--config": "config", "--log-level": "log_level"}


def _parse(argv: list[str] | None) -> _Args:
    args = sys.argv[1:] if argv is None else argv
    plain = _plain(args)
    return plain if plain is not None else _Args(**vars(_argparse(args)))


def _plain(args: list[str]) -> _Args | None:
    """The command lines clients and systemd give (each option once, as ``--name value`` or ``--name=value``),
    read without argparse: importing it cost 3 ms of every daemon start and 0.35 MiB of its memory. None for
    any other command line (``--help``, ``--version``, an abbreviation, a mistake): argparse reads it and
    answers as it always did."""
    found: dict[str, Any] = {}
    rest = iter(args)
    for arg in rest:
        name, sep, value = arg.partition("=")
        field = _FIELDS.get(name)
        if field is None or field in found:
            return None
        if not sep:
            value = next(rest, None)
            if value is None or value.startswith("-"):
                return None
        if field == "log_level" and value not in _LEVELS:
            return None
        found[field] = value if field == "log_level" else Path(value)
    return _Args(**found)


def _argparse(args: list[str]) -> Any:
    import argparse  # only for a command line _plain does not read

    parser = argparse.ArgumentParser(
        prog="mmd", description="The mm daemon: owns sessions, tools and models."
    )
    parser.add_argument(
        "--socket", type=Path, help="socket path (default: $MM_SOCKET or $XDG_RUNTIME_DIR/mm/mmd.sock)"
    )
    parser.add_argument("--state-dir", type=Path, help="store and logs (default: $XDG_STATE_HOME/mm)")
    parser.add_argument("--config", type=Path, help="user config (default: $XDG_CONFIG_HOME/mm/config.yaml)")
    parser.add_argument("--log-level", default="INFO", choices=list(_LEVELS))
    parser.add_argument("--version", action="version", version=f"mmd {__version__}")
    return parser.parse_args(args)


# The most the daemon's log takes on disk: this many bytes in mmd.log, as many in mmd.log.1 before it.
LOG_BYTES = 8 * 1024 * 1024


class _Log(logging.FileHandler):
    """The daemon's log, 0600 like the store (it names sessions, commands and paths; an older mm's 0644 log is
    tightened too), and bounded: a process that made the daemon warn in a loop (a client dropped, refused,
    an accept failing) filled the disk, and a daemon that runs for months grew its log without end. Past
    LOG_BYTES the file becomes mmd.log.1 (the one before goes) and a new one starts. (logging.handlers'
    RotatingFileHandler does this too, with 2 ms of imports, pickle's among them, at every start.)"""

    def emit(self, record: logging.LogRecord) -> None:
        # Never raises, as a handler must: on a full disk tell() and close() flush what a failed write left
        # buffered, and their ENOSPC left the log call (any `log.error`) and stopped the daemon with it.
        try:
            if self.stream is not None and self.stream.tell() >= LOG_BYTES:
                try:
                    self.stream.close()
                finally:
                    self.stream = None  # type: ignore[assignment]  # FileHandler.emit opens it again
                with contextlib.suppress(OSError):  # then it is written on
                    os.replace(self.baseFilename, self.baseFilename + ".1")
        except OSError:
            self.handleError(record)  # logging's own report (to stderr), then the line is dropped
            return
        super().emit(record)

    def _open(self) -> Any:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)
        except BaseException:
            os.close(fd)
            raise


def _logging(state_dir: Path, level: str) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = state_dir / "mmd.log"
    handlers: list[logging.Handler] = [_Log(log_path, encoding="utf-8")]
    if sys.stderr.isatty() or _stderr_is_journal():
        handlers.append(logging.StreamHandler())
    logging.basicConfig(
        level=level, handlers=handlers, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    # One INFO line per model request would drown the daemon's own lines.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    return log_path


def _stderr_is_journal() -> bool:
    """True when systemd connected stderr to the journal (``JOURNAL_STREAM=dev:inode``)."""
    try:
        st = os.fstat(sys.stderr.fileno())
    except (OSError, ValueError):
        return False
    return os.environ.get("JOURNAL_STREAM") == f"{st.st_dev}:{st.st_ino}"


class _Ready:
    """Passed to ``Daemon.serve`` as its task status: once it listens, tell systemd."""

    def __init__(self, notifier: sdnotify.Notifier) -> None:
        self.notifier = notifier

    def started(self, value: object = None) -> None:
        self.notifier.notify("READY=1", f"MAINPID={os.getpid()}")


# prctl(2): a process that is not dumpable has its /proc/PID/environ, mem and fd readable by root alone.
PR_SET_DUMPABLE = 4


def _undumpable() -> None:
    """Keep the daemon's environment (its API keys) and memory from its own children: each runs as the
    person, confined or not (Landlock does not govern reading /proc), and a bash call's
    ``cat /proc/$PPID/environ`` put every key of the daemon into the model's next request and the store.
    A child's exec makes it dumpable again: its own environment is the cleaned one (procs/environ.py).
    ``MM_DUMPABLE=1`` leaves it as it was, for a tool that measures the daemon from outside (its descriptors)."""
    if os.environ.get("MM_DUMPABLE") == "1":
        return
    if cspawn.LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        logging.getLogger("mmd").warning(
            "prctl(PR_SET_DUMPABLE, 0) failed: children may read the daemon's keys"
        )


def _absolute_path() -> None:
    """Only absolute folders in PATH, before any child starts (procs/environ.py: a cloned repository's
    ``./bash`` was run for a ``.`` or an empty entry), saying which entries were left out."""
    dropped = environ.keep_absolute_path()
    if dropped:
        logging.getLogger("mmd").warning(
            "PATH entries left out, since mm starts programs in projects it does not trust and a relative "
            "entry would find a project's own: %s (PATH is now %s)",
            ", ".join(repr(d) for d in dropped),
            os.environ["PATH"],
        )


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    state_dir = args.state_dir or paths.state_dir()
    try:
        # Before the log is opened there: a folder another user controls could redirect it.
        trust.ensure_private_dir(state_dir, fix=trust.STATE_FIX)
    except PermissionError as exc:
        print(f"mmd: {exc}", file=sys.stderr)
        return 1
    _logging(state_dir, args.log_level)
    _absolute_path()
    _undumpable()
    # Under systemd: the socket it bound for us (socket activation) and where to say "ready".
    notifier = sdnotify.Notifier.from_environ()
    try:
        listen_sock = sdnotify.activated_socket()
    except sdnotify.ActivationError as exc:
        logging.getLogger("mmd").error("%s", exc)
        print(f"mmd: {exc}", file=sys.stderr)
        return 1
    socket_path = args.socket.absolute() if args.socket else None  # where it was started: the log says so
    if listen_sock is not None:
        bound = sdnotify.socket_address(listen_sock)
        socket_path = Path(bound) if bound else socket_path
        logging.getLogger("mmd").info("socket activated by systemd: %s", bound or "(unnamed)")
    daemon = Daemon(methods=METHODS, socket_path=socket_path, state_dir=state_dir, config_path=args.config)
    daemon.on_stopping = lambda: notifier.notify("STOPPING=1")
    try:
        trio.run(
            lambda: daemon.serve(listen_sock=listen_sock, handle_signals=True, task_status=_Ready(notifier))
        )
    except AlreadyRunning as exc:
        print(f"mmd: {exc}; nothing to do", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except (PermissionError, unix.PathTooLong) as exc:
        print(f"mmd: {exc}", file=sys.stderr)
        return 1
    except StoreError as exc:  # its message says what to do (a full disk, a newer schema): not a bug
        logging.getLogger("mmd").error("%s", exc)
        print(f"mmd: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:
        if not isinstance(exc, KeyboardInterrupt | SystemExit):
            # In the log too: under systemd or started by a client, stderr is seen by no one.
            logging.getLogger("mmd").critical(
                "mmd stopped on an error it did not expect (a bug: please report it with this log); "
                "the next client starts it again",
                exc_info=True,
            )
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
