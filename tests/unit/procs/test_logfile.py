"""A long-lived child's log, written by the daemon (mmd/procs/logfile.py): bounded on disk, drained whole."""

from __future__ import annotations

import pytest
import trio

from mmd.procs.logfile import BoundedLog, Drains


def test_a_childs_log_is_bounded_at_start_and_while_it_writes(tmp_path):
    # The daemon writes a long-lived child's output: past the limit the log becomes LOG.1 (the one before goes)
    # and starts again, as the child starts and while it writes. The child once wrote the file itself.
    path = tmp_path / "fs-1234abcd.log"
    path.write_bytes(b"x" * 900)
    with BoundedLog(path, "--- start\n", limit=1_000) as log:
        assert path.read_bytes() == b"x" * 900 + b"--- start\n"  # within the bound: appended to
        assert log.started == 910
        log.write(b"a" * 60)
        log.write(b"b" * 60)  # 1,030 bytes: past the bound
        assert (tmp_path / "fs-1234abcd.log.1").read_bytes() == b"x" * 900 + b"--- start\n" + b"a" * 60
        assert path.read_bytes() == b"b" * 60 and log.started == 0
        for _ in range(40):
            log.write(b"c" * 100)
    assert path.stat().st_size <= 1_000 and (tmp_path / "fs-1234abcd.log.1").stat().st_size <= 1_000
    with BoundedLog(path, "--- again\n", limit=1_000):
        pass
    assert path.read_bytes().endswith(b"c--- again\n") and path.stat().st_size <= 1_000
    (tmp_path / "gone").mkdir()
    link = tmp_path / "gone" / "linked.log"
    link.symlink_to(tmp_path / "elsewhere.log")
    with pytest.raises(OSError):  # a link in the log folder is not followed
        BoundedLog(link, "--- x\n")
    assert not (tmp_path / "elsewhere.log").exists()


class Pipe:
    """A child's output pipe as the drains read it: its chunks, then its end."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def receive_some(self, most: int) -> bytes:
        await trio.sleep(0)
        return self.chunks.pop(0) if self.chunks else b""


async def test_drains_read_every_stream_to_its_end_before_wait_returns():
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:
        drains = Drains(nursery, got.append, Pipe(b"a", b"b"), Pipe(b"c"))
        await drains.wait(10)
        assert sorted(got) == [b"a", b"b", b"c"]
