"""The systemd user units of mmd, and ``mm daemon install-service``.

The unit texts live here, not only in the repository's ``systemd/`` folder,
so an installed mm can write them; ``systemd/`` holds the same texts rendered
for ``~/.local/bin/mmd`` (a test keeps both equal).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

SOCKET_UNIT = "mmd.socket"
SERVICE_UNIT = "mmd.service"
# ExecStart of the copies in the repository's systemd/ folder (pip install --user, pipx).
DEFAULT_EXEC = "%h/.local/bin/mmd"

SOCKET_TEXT = """\
# mmd.socket: systemd listens on mm's socket and starts mmd.service on the first connection.
# See docs/systemd.md in mm. Install with `mm daemon install-service`, then: systemctl --user enable --now mmd.socket
[Unit]
Description=mm agent harness daemon socket

[Socket]
# The path mm clients use by default: $XDG_RUNTIME_DIR/mm/mmd.sock (%t is $XDG_RUNTIME_DIR).
ListenStream=%t/mm/mmd.sock
# Only you may connect (mmd also checks the peer's uid on every connection).
SocketMode=0600
# The mm/ folder is private, as when mmd creates it itself.
DirectoryMode=0700
# Remove the socket file when the socket unit stops, so clients then start their own daemon.
RemoveOnStop=yes

[Install]
WantedBy=sockets.target
"""

SERVICE_TEXT = """\
# mmd.service: the mm daemon, started by mmd.socket on the first connection.
# Edit with `systemctl --user edit mmd.service` rather than here: install-service overwrites this file.
[Unit]
Description=mm agent harness daemon
Requires=mmd.socket
After=mmd.socket

[Service]
# mmd sends READY=1 to $NOTIFY_SOCKET once it accepts connections, STOPPING=1 when it shuts down.
Type=notify
ExecStart={exec_start}
# Restart after a crash; `mm daemon stop` exits cleanly and the socket starts mmd again on demand.
Restart=on-failure
RestartSec=2s
# SIGTERM goes to mmd alone: it cancels running turns and stops their process groups itself;
# systemd SIGKILLs whatever is left in the unit once mmd has exited or TimeoutStopSec has run out.
KillMode=mixed
TimeoutStopSec=30s
# A command the model runs cannot fork-bomb the session: at most this many tasks in the unit.
TasksMax=4096
# No core dumps of mmd (its memory holds API keys); tools may still raise the soft limit.
LimitCORE=0:infinity
# Under memory pressure the kernel picks mm's processes (a runaway command) before your editor...
OOMScoreAdjust=100
# ...and a command killed for memory does not take the daemon down with it.
OOMPolicy=continue
# Left out on purpose, because they would break the commands a user runs through mm:
#   NoNewPrivileges=, SystemCallFilter=, LockPersonality=, MemoryDenyWriteExecute= (in a user unit these
#     imply no-new-privileges: sudo and other setuid programs fail; JITs such as node and java fail),
#   ProtectSystem=, ProtectHome=, PrivateTmp=, PrivateUsers= (tools must see and write your files and
#     the real /tmp, under your real uid),
#   UMask=0077 (files your tools create would become private to you alone).

[Install]
# `systemctl --user enable mmd.service` enables the socket too.
Also=mmd.socket
"""


def mmd_exec() -> str:
    """The command that runs the installed mmd, as an ExecStart= value.

    The ``mmd`` script beside this Python (a venv's or an install's bin
    folder), else ``mmd`` on PATH, else ``PYTHON -m mmd``.
    """
    beside = Path(sys.executable).parent / "mmd"
    if beside.is_file() and os.access(beside, os.X_OK):
        return _quote(str(beside))
    found = shutil.which("mmd")
    if found:
        return _quote(os.path.abspath(found))
    return f"{_quote(sys.executable)} -m mmd"


def _quote(arg: str) -> str:
    # systemd expands % specifiers and $VARIABLES in ExecStart=: write them %% and $$.
    arg = arg.replace("%", "%%").replace("$", "$$")
    if any(c.isspace() or c in "\"'\\" for c in arg):
        arg = '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def render(exec_start: str) -> dict[str, str]:
    """The unit files by name, with *exec_start* as the service's ExecStart=."""
    return {SOCKET_UNIT: SOCKET_TEXT, SERVICE_UNIT: SERVICE_TEXT.format(exec_start=exec_start)}


def user_unit_dir() -> Path:
    """``$XDG_CONFIG_HOME/systemd/user``: where systemd looks for a user's own units."""
    base = os.environ.get("XDG_CONFIG_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "systemd" / "user"


def install(unit_dir: Path | None = None, exec_start: str | None = None) -> list[Path]:
    """Write both units (overwriting older copies); returns the paths written."""
    unit_dir = unit_dir or user_unit_dir()
    unit_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render(exec_start or mmd_exec()).items():
        path = unit_dir / name
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
        written.append(path)
    return written
