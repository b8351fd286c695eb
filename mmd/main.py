"""``mmd``: run the daemon in the foreground (clients start it detached on demand)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from . import __version__
from .rpc import paths

# Exit status when another daemon already serves the socket: not an error.
EXIT_ALREADY_RUNNING = 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="mmd", description="The mm daemon: owns sessions, tools and models."
    )
    parser.add_argument(
        "--socket", type=Path, help="socket path (default: $MM_SOCKET or $XDG_RUNTIME_DIR/mm/mmd.sock)"
    )
    parser.add_argument("--state-dir", type=Path, help="store and logs (default: $XDG_STATE_HOME/mm)")
    parser.add_argument("--config", type=Path, help="user config (default: $XDG_CONFIG_HOME/mm/config.yaml)")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--version", action="version", version=f"mmd {__version__}")
    return parser.parse_args(argv)


def _logging(state_dir: Path, level: str) -> Path:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = state_dir / "mmd.log"
    handlers: list[logging.Handler] = [logging.FileHandler(log_path)]
    if sys.stderr.isatty():
        handlers.append(logging.StreamHandler())
    logging.basicConfig(
        level=level, handlers=handlers, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    return log_path


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import trio

    from .daemon import Daemon
    from .transport import AlreadyRunning

    state_dir = args.state_dir or paths.state_dir()
    _logging(state_dir, args.log_level)
    daemon = Daemon(socket_path=args.socket, state_dir=state_dir, config_path=args.config)
    try:
        trio.run(lambda: daemon.serve(handle_signals=True))
    except AlreadyRunning as exc:
        print(f"mmd: {exc}; nothing to do", file=sys.stderr)
        return EXIT_ALREADY_RUNNING
    except PermissionError as exc:
        print(f"mmd: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
