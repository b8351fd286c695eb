"""Stress tests of the supervisor (marked slow): many cancelled process trees, a gigabyte of output.

The supervisor's other tests are in tests/unit/procs/test_supervisor.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import trio

from ..process_trees import cancel_tree_once, run


@pytest.fixture(autouse=True)
def no_leftover_children() -> Iterator[None]:
    yield
    assert psutil.Process().children(recursive=True) == []


@pytest.mark.slow
async def test_cancel_stress_no_survivor(tmp_path: Path) -> None:
    survivors = [pid for _ in range(100) for pid in await cancel_tree_once(tmp_path)]
    assert survivors == []


@pytest.mark.slow
async def test_one_gigabyte_of_output_in_bounded_memory(tmp_path: Path) -> None:
    total = 1_000_000_000
    line = b"abcdefghijklmnopqrstuvwxyz0123456789" * 2 + b"\n"  # 73 bytes
    argv = ["bash", "-c", f"yes {line[:-1].decode()} | head -c {total}"]
    me = psutil.Process()
    baseline = me.memory_info().rss
    peak = baseline
    chars = 0

    def count(stream: str, text: str) -> None:
        nonlocal chars
        chars += len(text)

    async def sample(done: trio.Event) -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, me.memory_info().rss)
            await trio.sleep(0.02)

    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample, done)
        result = await run(argv, tmp_path, on_output=count)
        done.set()
    spill = Path(result.spill_path or "")
    try:
        assert result.exit_code == 0 and result.truncated
        assert result.total_bytes == total == chars == spill.stat().st_size
        assert result.total_lines == total // len(line) + 1  # the last line is unterminated
        head, _, marker_and_tail = result.output.partition("\n[... ")
        assert head.startswith(line[:-1].decode()) and "read_file" in marker_and_tail
        assert len(result.output.encode()) < 30_000 + 300
        # Measured on the dev machine (2 vCPU VM): RSS grows by 0.1 to 3.1 MiB while
        # the gigabyte streams (reads of up to 1 MiB, decoded once each). 32 MiB leaves
        # ten times that for allocator noise and is 1/30 of the output.
        print(f"RSS growth {(peak - baseline) / 2**20:.1f} MiB")
        assert peak - baseline < 32 * 1024 * 1024
    finally:
        spill.unlink(missing_ok=True)
