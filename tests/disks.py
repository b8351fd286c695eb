"""A small disk of its own for a test: a tmpfs mounted on a folder, to fill up on purpose.

Mounting needs root (or CAP_SYS_ADMIN): elsewhere the test is skipped, naming why. The mount is lazily
unmounted at the end even if a process still has a file open there.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(folder: Path, size: str) -> Iterator[Path]:
    """*folder* (made if missing) as a tmpfs of *size* (``8m``), private to this user."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700,uid={os.getuid()}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here (root is needed): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Fill the file system *folder* is on to its last byte; the file that holds it (remove it to free it)."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        for size in (1024 * 1024, 4096, 512, 1):  # what is left after each is smaller than it
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
    assert free_bytes(folder) == 0
    return filler


def free_bytes(folder: Path) -> int:
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize
