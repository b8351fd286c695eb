"""inotify.Queued: whether events wait, asked without reading them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mmd import inotify

pytestmark = pytest.mark.skipif(inotify.LIBC is None, reason="no inotify here")


def test_queued_says_whether_an_event_waits_and_reads_none(tmp_path: Path) -> None:
    assert inotify.LIBC is not None
    fd = inotify.LIBC.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        queued = inotify.Queued(fd)
        assert inotify.LIBC.inotify_add_watch(fd, os.fsencode(tmp_path), inotify.IN_CREATE) >= 0
        assert not queued()
        (tmp_path / "made").write_text("x")
        assert queued() and queued()  # asking reads nothing: the event is still there
        [(_, mask, name)] = list(inotify.events(os.read(fd, 65536)))
        assert mask & inotify.IN_CREATE and name == b"made"
        assert not queued()
    finally:
        os.close(fd)


def test_a_closed_or_missing_descriptor_is_never_queued() -> None:
    assert not inotify.Queued(-1)()
