"""Checkpoints, ``mm diff`` and ``mm undo`` end to end: a real mmd, the real CLI, real git, real files.

Each turn is a scripted model's calls run with ``--yolo``; what the steps did to the working tree is
then read back from the files themselves (bytes and modes), not from what mm says it did.
"""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmd.undo.shadow import MAX_GIT_DATA

from .conftest import daemon_pids, run_mm, trust_here

BINARY = bytes(range(256)) * 4  # every byte value, NUL and invalid UTF-8 included


def bash(command: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def turn(work: Path, *extra: str) -> list[dict[str, Any]]:
    """One ``mm -p`` turn in *work*; its events."""
    result = run_mm("--yolo", "--output-format", "events", *extra, "-p", "go", cwd=work)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def changed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["kind"] == "files_changed"]


def tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file and link under *root* (not .git): its mode and bytes (a link: its target)."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            body = os.readlink(path).encode() if stat.S_ISLNK(st.st_mode) else Path(path).read_bytes()
            found[os.path.relpath(path, root)] = (st.st_mode, body)
    return found


def mm_ok(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    result = run_mm(*args, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result


def set_daemon(home: Path, **daemon: Any) -> None:
    path = home / "config" / "mm" / "config.yaml"
    config = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**config, "daemon": daemon}))


@pytest.fixture
def project(mm_home: Path) -> Path:
    """A git repository of the user's, with a commit, an executable, a binary and an ignored folder."""
    work = mm_home / "work"
    (work / "notes.txt").write_text("first line\nsecond line\n")
    (work / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (work / "run.sh").chmod(0o755)
    (work / "data.bin").write_bytes(BINARY)
    (work / ".gitignore").write_text("build/\n")
    (work / "build").mkdir()
    (work / "build" / "out.log").write_text("old log\n")
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(mm_home / "home")}
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run([*git, *args], cwd=work, check=True, env=env)
    return work


def test_bash_and_write_file_steps_are_undone_byte_for_byte_and_the_undo_too(mm_home, scripted, project):
    work = project
    scripted(
        [
            bash("rm run.sh data.bin && printf 'changed\\n' >> notes.txt && echo new > build/out.log"),
            call("write_file", path="notes.txt", content="all new\n"),
            {"text": "Done."},
        ]
    )
    start = tree(work)
    user_index = (work / ".git" / "index").read_bytes()
    events = turn(work)

    first, second = changed(events)
    assert sorted((f["path"], f["change"]) for f in first["files"]) == [
        ("data.bin", "deleted"),
        ("notes.txt", "modified"),
        ("run.sh", "deleted"),
    ]  # build/ is ignored: not a change mm records
    assert second["files"] == [{"path": "notes.txt", "change": "modified"}]
    assert (first["step"], second["step"]) == (1, 2)
    kinds = [e["kind"] for e in events]
    assert kinds.index("files_changed") < kinds.index("tool_result")
    after_turn = tree(work)

    shown = mm_ok("diff", "--step", "1", cwd=work)
    assert "-echo hi" in shown.stdout and "deleted file mode 100755" in shown.stdout
    whole = mm_ok("diff", cwd=work).stdout
    assert "+all new" in whole and "-first line" in whole and "build/out.log" not in whole

    undone = mm_ok("undo", "--to", "1", cwd=work)
    assert "restored to before step 1" in undone.stdout and "step 3" in undone.stdout
    now = tree(work)
    assert now["build/out.log"] == after_turn["build/out.log"]  # ignored: never snapshotted, left alone
    del now["build/out.log"], start["build/out.log"]
    assert now == start  # bytes and modes, the executable bit of run.sh included
    assert (work / ".git" / "index").read_bytes() == user_index  # the user's repository untouched

    mm_ok("undo", cwd=work)  # undo of the undo (step 3): the turn's result again
    assert tree(work) == after_turn


def test_a_declared_tool_that_creates_files_in_a_folder_that_is_not_a_git_repository(mm_home, scripted):
    work = mm_home / "work"
    (work / "mk.sh").write_text(
        "#!/bin/sh\nmkdir -p out/deep && echo made > out/deep/a.txt && echo b > b.txt\n"
    )
    (work / "mk.sh").chmod(0o755)
    agent = {
        "tools": [
            {
                "name": "make_files",
                "description": "Make the output files.",
                "command": ["./mk.sh"],
                "effects": "write",
            }
        ]
    }
    (work / "mm.yaml").write_text(yaml.safe_dump(agent))
    trust_here(work)
    scripted([call("make_files"), {"text": "Made."}])
    before = tree(work)
    [step] = changed(turn(work))
    assert sorted(f["path"] for f in step["files"]) == ["b.txt", "out/deep/a.txt"]
    assert not (work / ".git").exists()

    mm_ok("undo", cwd=work)
    assert tree(work) == before
    assert not (work / "out").exists()  # the folders it created are gone with their files


def test_calls_that_change_nothing_are_no_steps_and_a_change_between_turns_is_nobody_s_step(
    mm_home, scripted, project
):
    # The daemon watches the project (mmd/undo/watch.py): a snapshot of an unchanged tree runs no git.
    # What the steps record must not depend on it: each step has exactly its call's files, and what
    # someone else changed between two turns belongs to no step.
    work = project
    scripted(
        [
            bash("cat notes.txt"),
            bash("echo one > one.txt"),
            bash("ls -la && git status --short"),
            bash("mkdir -p made/deep && echo two > made/deep/two.txt"),
            bash("echo three > made/deep/three.txt"),
            {"text": "Done."},
        ]
    )
    steps = changed(turn(work))
    assert [sorted(f["path"] for f in s["files"]) for s in steps] == [
        ["one.txt"],
        ["made/deep/two.txt"],
        ["made/deep/three.txt"],  # in a folder made by the call before: watched since
    ]
    (work / "notes.txt").write_text("my own edit\n")  # by someone else, between the turns
    scripted([bash("cat notes.txt"), bash("echo four > four.txt"), {"text": "Done."}])
    [step] = changed(turn(work))
    assert step["files"] == [{"path": "four.txt", "change": "added"}]
    mm_ok("undo", cwd=work)
    assert not (work / "four.txt").exists()
    assert (work / "notes.txt").read_text() == "my own edit\n"  # not undone: no step of mm's


def test_undo_refuses_files_changed_since_and_names_them_unless_forced(mm_home, scripted):
    work = mm_home / "work"
    (work / "config.ini").write_text("a = 1\n")
    (work / "other.txt").write_text("untouched\n")
    scripted([bash("echo 'a = 2' > config.ini"), {"text": "Changed."}])
    turn(work)
    (work / "config.ini").write_text("a = 3  # my own edit\n")  # by someone else, after the step

    refused = run_mm("undo", cwd=work)
    assert refused.returncode == 1
    assert "config.ini" in refused.stderr and "--force" in refused.stderr
    assert "other.txt" not in refused.stderr
    assert (work / "config.ini").read_text() == "a = 3  # my own edit\n"  # nothing was changed

    mm_ok("undo", "--force", cwd=work)
    assert (work / "config.ini").read_text() == "a = 1\n"


def test_hostile_names_and_links_out_of_the_project_are_undone_without_following_them(mm_home, scripted):
    work = mm_home / "work"
    outside = mm_home / "outside.txt"
    outside.write_text("not mine\n")
    (work / "keep.txt").write_text("keep\n")
    scripted(
        [
            bash(
                f"printf x > $'line\\nbreak.txt' && ln -s {outside} link && rm keep.txt && ln -s {outside} keep.txt"
            ),
            {"text": "Done."},
        ]
    )
    before = tree(work)
    [step] = changed(turn(work))
    assert {"path": "line\nbreak.txt", "change": "added"} in step["files"]
    assert {"path": "keep.txt", "change": "type"} in step["files"]

    mm_ok("undo", cwd=work)
    assert tree(work) == before
    assert outside.read_text() == "not mine\n"


def test_a_tree_over_the_limit_is_not_snapshotted_and_the_turn_says_so(mm_home, scripted):
    work = mm_home / "work"
    for n in range(5):
        (work / f"f{n}.txt").write_text(str(n))
    scripted([bash("echo x > f0.txt"), {"text": "Done."}])
    set_daemon(mm_home, snapshot_max_files=3)
    events = turn(work)
    [skipped] = [e["data"] for e in events if e["kind"] == "snapshot_skipped"]
    assert skipped["reason"] == "too_many_files" and "snapshot_max_files" in skipped["message"]
    assert changed(events) == []
    nothing = run_mm("undo", cwd=work)
    assert nothing.returncode == 1 and "no recorded step" in nothing.stderr


def test_read_calls_are_not_steps_and_diff_of_a_step_it_does_not_have_says_which_exist(mm_home, scripted):
    work = mm_home / "work"
    (work / "a.txt").write_text("a\n")
    scripted([call("read_file", path="a.txt"), bash("echo b > a.txt"), {"text": "Done."}])
    events = turn(work)
    [step] = changed(events)
    assert step["step"] == 1
    wrong = run_mm("diff", "--step", "7", cwd=work)
    assert wrong.returncode == 1 and "steps are 1 to 1" in wrong.stderr


def test_a_project_file_git_would_read_without_end_takes_no_more_memory_than_mm_allows(mm_home, scripted):
    # A nested repository (a tarball can ship one) whose branch ref is a link to /dev/zero: a snapshot's
    # `git add` resolves the embedded repository's HEAD and reads the ref whole. Before each git of a
    # snapshot had a heap limit, it grew until the kernel's OOM killer ran (21 GB in 40 s). The daemon gets
    # a limit of its own here too, above mm's, so that a regression cannot take the machine; that git runs
    # under mm's own limit is proved by test_shadow.py (ulimit -d), this case what the turn and person see.
    work = mm_home / "work"
    (work / "README").write_text("hello\n")
    nested = work / "vendor" / "lib" / ".git"
    (nested / "refs" / "heads").mkdir(parents=True)
    (nested / "objects").mkdir()
    (nested / "HEAD").write_text("ref: refs/heads/main\n")
    os.symlink("/dev/zero", nested / "refs" / "heads" / "main")
    mm_ok("daemon", "start", cwd=work)
    [pid] = daemon_pids(mm_home)
    resource.prlimit(pid, resource.RLIMIT_DATA, (3 << 30, 3 << 30))
    scripted([bash("echo ran > ran.txt"), {"text": "Done."}])
    events = turn(work)
    [skipped, *_] = [e["data"] for e in events if e["kind"] == "snapshot_skipped"]
    assert "git add failed" in skipped["message"]
    assert f"mm lets it take {MAX_GIT_DATA >> 20} MiB" in skipped["message"]
    assert "daemon.snapshot_max_files: 0" in skipped["message"]
    assert (work / "ran.txt").read_text() == "ran\n"  # the call ran, and the turn ended with its answer
    assert events[-1]["kind"] == "turn_ended" and events[-1]["data"]["status"] == "ok"
    assert daemon_pids(mm_home) == [pid]
