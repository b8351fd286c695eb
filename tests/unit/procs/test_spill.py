"""Spill files that cannot be written, and the free space a spill leaves its disk (mmd/procs/spill.py).

A spill that meets a full disk, a quota or a read-only folder is given up and the model told why, and no spill
takes the last tenth of its file system (at most 1 GiB). The reserve is checked on a real tmpfs (root only:
skipped elsewhere); a write that fails on /dev/full, and a folder that cannot be made, need no root.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mmd.procs import spill
from mmd.procs.output import OutputCapture
from mmd.procs.spill import NoRoom, Spill, keep_free, write_whole

from ...disks import free_bytes, small_disk
from ...process_trees import run


def statvfs(blocks: int, avail: int, frsize: int = 4096) -> os.statvfs_result:
    return os.statvfs_result((frsize, frsize, blocks, avail, avail, 0, 0, 0, 0, 255))


def test_the_reserve_is_a_tenth_of_the_file_system_and_at_most_a_gibibyte() -> None:
    assert keep_free(statvfs(blocks=256, avail=10)) == 256 * 4096 // 10  # a 1 MiB disk: ~102 KiB
    assert keep_free(statvfs(blocks=2_621_440, avail=10)) == 1024**3  # 10 GiB: the tenth
    assert keep_free(statvfs(blocks=262_144_000, avail=10)) == spill.KEEP_FREE_MAX  # 1,000 GiB: the cap


def test_a_spill_stops_where_its_disk_would_keep_less_than_its_reserve(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        path = disk / "session" / "output-call_1.log"
        keep = keep_free(os.statvfs(disk))
        room = free_bytes(disk) - keep
        out = Spill(path).open()
        written = 0
        with pytest.raises(NoRoom, match="the disk would keep less than"):
            while True:
                out.write(b"y" * 10_000)
                written += 10_000
        assert free_bytes(disk) >= keep  # the reserve is left
        assert written > room - 10_000 * 3  # and the room there was taken (to within a write or two)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        out.close()  # not kept: removed
        assert not path.exists()


def test_a_whole_text_that_does_not_fit_leaves_no_part_of_it(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk", "1m") as disk:
        path = disk / "session" / "output-call_2.log"
        lost = write_whole(path, b"y" * 2 * 1024 * 1024)
        assert lost is not None and lost.startswith("the disk would keep less than")
        assert not path.exists()  # a part would read as the whole
        assert write_whole(path, b"fits") is None and path.read_bytes() == b"fits"


def test_a_capture_whose_spill_fails_reads_on_and_says_why() -> None:
    # /dev/full: every write fails with ENOSPC, as on a full disk.
    with open("/dev/full", "wb", buffering=0) as full:
        cap = OutputCapture(lambda: full, max_bytes=100, max_lines=10)
        for i in range(1000):
            cap.feed("stdout", f"line {i}\n".encode())
        cap.finish()
    assert cap.spill_error == "no space left on device" and cap.truncated
    text = cap.render("/state/sessions/s/output-call_1.log")
    assert "output-call_1.log" not in text  # it names no file that does not hold the output
    assert "the whole output was not kept (no space left on device)" in text
    assert text.startswith("line 0\n") and text.endswith("line 999\n")  # the head and tail are whole


def test_a_spill_that_cannot_be_opened_holds_nothing_back() -> None:
    def refused() -> spill.Spill:
        raise PermissionError(13, "Permission denied")

    cap = OutputCapture(refused, max_bytes=100, max_lines=10)
    for i in range(10_000):
        cap.feed("stdout", f"line {i}\n".encode())
    cap.finish()
    assert cap.spill_error == "permission denied"
    assert cap._held == []  # what waited for the file is let go: memory stays within the budgets
    assert "the whole output was not kept (permission denied)" in cap.render(None)


async def test_a_command_that_would_fill_the_disk_with_output_ends_as_it_did(tmp_path: Path) -> None:
    # The supervisor's spill on a 1 MiB disk: 5 MB of output. The call ends with the command's exit code,
    # the model reads head and tail and why the whole is gone, and the disk keeps its reserve.
    with small_disk(tmp_path / "disk", "1m") as disk:
        path = disk / "session" / "output-call_3.log"
        result = await run(
            ["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' y | fold -w 99"],
            tmp_path,
            spill_path=path,
            max_bytes=2000,
            max_lines=40,
        )
        assert result.exit_code == 0 and result.truncated and result.spill_path is None
        assert "the whole output was not kept (the disk would keep less than" in result.output
        assert result.total_bytes == 5_000_000 + 5_000_000 // 99  # every byte was read all the same
        assert not path.exists() and free_bytes(disk) >= keep_free(os.statvfs(disk))
