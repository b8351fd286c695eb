"""A chain of folders deeper than Python's recursion limit, made and removed without recursion.

os.makedirs, os.walk and shutil.rmtree (pytest's clean-up of tmp_path too) each recurse once per
level in Python 3.11, so a test of a deep tree makes it and takes it away here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# Deeper than Python's recursion limit: a recursive walk of it raises RecursionError.
DEEP = sys.getrecursionlimit() + 100


@contextlib.contextmanager
def chain(root: Path, depth: int = DEEP, name: str = "d") -> Iterator[Path]:
    """*depth* folders *name*, each inside the last, under *root*; yields the deepest, and removes the
    chain (whatever was put in it) afterwards."""
    path = root
    try:
        for _ in range(depth):
            path = path / name
            path.mkdir()
        yield path
    finally:
        while path != root:
            for entry in os.scandir(path):
                os.unlink(entry.path) if not entry.is_dir(follow_symlinks=False) else os.rmdir(entry.path)
            path.rmdir()
            path = path.parent
