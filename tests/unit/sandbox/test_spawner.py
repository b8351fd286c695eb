"""The confined spawner threads (mmd/procs/spawner.py): kept per sandbox, never confined to a stale folder.

Each test gives its Sandbox a temp dir of its own, as tests/unit/sandbox/test_sandbox.py does.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from mmd.procs import run_tool_process, spawner
from mmd.sandbox import Sandbox, support

pytestmark = pytest.mark.skipif(not support().available, reason="the kernel offers no Landlock")


@pytest.fixture(autouse=True)
def no_spawners() -> Iterator[None]:
    spawner.forget()
    yield
    spawner.forget()


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    project, temp = tmp_path / "project", tmp_path / "temp"
    project.mkdir()
    temp.mkdir()
    return project, temp


def box_for(project: Path, temp: Path) -> Sandbox:
    return Sandbox(roots=(str(project),), temp=str(temp))


async def sh(command: str, cwd: Path, box: Sandbox) -> object:
    return await run_tool_process(
        ["bash", "-c", command], cwd=cwd, env={}, spill_path=cwd.parent / "spill.log", sandbox=box
    )


def spawner_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == spawner.THREAD_NAME]


def test_the_spawns_of_one_sandbox_share_one_thread_and_stay_confined(dirs, tmp_path: Path) -> None:
    project, temp = dirs
    box = box_for(project, temp)

    async def main() -> list[object]:
        results = [await sh(f"echo {i} > f{i}.txt", project, box) for i in range(3)]
        results.append(await sh(f"echo out > {tmp_path}/out.txt", project, box))
        return results

    results = trio.run(main)
    assert [(project / f"f{i}.txt").read_text() for i in range(3)] == ["0\n", "1\n", "2\n"]
    assert not (tmp_path / "out.txt").exists()
    assert "Permission denied" in results[-1].output
    assert len(spawner.alive()) == 1
    assert len(spawner_threads()) == 1


@pytest.mark.parametrize("sync_wait", [0.0, spawner.SYNC_WAIT, 30.0])
def test_spawns_under_way_together_are_all_answered(dirs, sync_wait: float, monkeypatch) -> None:
    # However long the loop's thread waits before it parks the task (never, as set, until each is done),
    # every spawn is answered once, with its own outcome.
    monkeypatch.setattr(spawner, "SYNC_WAIT", sync_wait)
    project, temp = dirs
    box = box_for(project, temp)
    outputs: dict[int, str] = {}

    async def one(i: int) -> None:
        outputs[i] = (await sh(f"echo call-{i}", project, box)).output

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(one, i)

    trio.run(main)
    assert outputs == {i: f"call-{i}\n" for i in range(8)}
    assert len(spawner.alive()) == 1


def test_a_folder_made_again_is_writable_the_old_rule_named_the_folder_that_was_removed(dirs) -> None:
    project, temp = dirs
    box = box_for(project, temp)

    async def main() -> object:
        await sh("echo before > a.txt", project, box)
        shutil.rmtree(project)
        project.mkdir()
        return await sh("echo after > b.txt", project, box)

    result = trio.run(main)
    assert (project / "b.txt").read_text() == "after\n", result.output
    assert len(spawner.alive()) == 1  # the old one saw its folder gone and ended


def test_spawns_queued_behind_one_that_found_its_folder_replaced_all_go_to_the_new_spawner(dirs) -> None:
    # The spawner looks at its folders before each job; the first to find one replaced ends it, and that
    # job and every one queued behind it are handed to one new spawner, each run once.
    project, temp = dirs
    box = box_for(project, temp)

    async def main() -> list[object]:
        await sh("true", project, box)
        shutil.rmtree(project)
        project.mkdir()
        results: list[object] = []

        async def one(i: int) -> None:
            results.append(await sh(f"echo {i} > f{i}.txt", project, box))

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(one, i)
        return results

    results = trio.run(main)
    assert [(project / f"f{i}.txt").read_text() for i in range(6)] == [f"{i}\n" for i in range(6)], results
    assert len(spawner.alive()) == 1 and len(spawner_threads()) == 1


def test_a_folder_moved_away_is_not_writable_through_the_rule_made_before_the_move(dirs, tmp_path) -> None:
    project, temp = dirs
    box = box_for(project, temp)
    moved = tmp_path / "moved"

    async def main() -> None:
        await sh("true", project, box)
        project.rename(moved)
        project.mkdir()
        await sh(f"echo x > {moved}/escaped.txt; echo y > in.txt", project, box)

    trio.run(main)
    assert not (moved / "escaped.txt").exists()
    assert (project / "in.txt").read_text() == "y\n"


def test_a_spawner_that_cannot_confine_itself_answers_and_the_next_spawn_makes_another(
    dirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, temp = dirs
    box = box_for(project, temp)
    real = spawner.confine_thread
    calls: list[int] = []

    def fails_once(sandbox: Sandbox) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OSError(12, "Cannot allocate memory")
        real(sandbox)

    monkeypatch.setattr(spawner, "confine_thread", fails_once)

    async def main() -> list[object]:
        return [await sh("echo ok", project, box) for _ in range(2)]

    failed, worked = trio.run(main)
    assert failed.spawn_error and "Cannot allocate memory" in failed.spawn_error
    assert worked.output == "ok\n" and not worked.spawn_error
    assert len(calls) == 2 and len(spawner.alive()) == 1


def test_past_the_limit_the_least_recently_used_spawner_ends(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(spawner, "MAX_SPAWNERS", 2)
    temp = tmp_path / "temp"
    temp.mkdir()
    boxes = []
    for name in ("a", "b", "c"):
        (tmp_path / name).mkdir()
        boxes.append(box_for(tmp_path / name, temp))

    async def main() -> None:
        for box in boxes:
            await sh("true", Path(box.roots[0]), box)

    trio.run(main)
    first_thread = [t for t in spawner_threads()]
    kept = spawner.alive()
    assert [s.box for s in kept] == boxes[1:]
    for thread in first_thread:
        if all(thread is not s.thread for s in kept):
            thread.join(timeout=10)
            assert not thread.is_alive()
    assert len(spawner_threads()) == 2


def test_an_answer_that_comes_as_the_wait_ends_is_taken_once(dirs) -> None:
    # Jobs that take from nothing to twice SYNC_WAIT: some answer while the loop's thread waits, some
    # after it parked the task, some in between. Each is taken once (a lost wake would hang: the wait
    # for a spawn cannot be cancelled, so the run is watched from another thread).
    box = box_for(*dirs)
    results: list[int] = []

    async def main() -> None:
        for i in range(300):
            delay = (i % 9) * spawner.SYNC_WAIT / 4
            results.append(await spawner.run_spawner(box, lambda d=delay, i=i: (time.sleep(d), i)[1]))

    runner = threading.Thread(target=trio.run, args=(main,), daemon=True)
    runner.start()
    runner.join(timeout=120)
    assert not runner.is_alive(), "a spawn's answer was lost"
    assert results == list(range(300))


def test_a_spawner_whose_thread_dies_answers_its_jobs_and_the_next_spawn_makes_another(
    dirs, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = box_for(*dirs)
    real_run = spawner._Job.run

    def run(job: object) -> None:
        if job.args == ("die",):  # type: ignore[attr-defined]
            raise RuntimeError("the spawner's own code failed")
        real_run(job)  # type: ignore[arg-type]

    monkeypatch.setattr(spawner._Job, "run", run)

    got: list[object] = []

    async def main() -> None:
        with pytest.raises(RuntimeError, match="own code failed"):
            await spawner.run_spawner(box, lambda _: "never", "die")
        got.append(await spawner.run_spawner(box, lambda x: x, "ok"))

    runner = threading.Thread(target=trio.run, args=(main,), daemon=True)  # an unanswered job would hang
    runner.start()
    runner.join(timeout=60)
    assert not runner.is_alive(), "the job of the thread that died was never answered"
    assert got == ["ok"]
    assert len(spawner.alive()) == 1 and not spawner.alive()[0].retired
