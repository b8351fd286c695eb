"""The hard-link check's watch (mmd/sandbox/links.py, _Quiet): a check skips the walk only while inotify
reported no name made, moved or removed under the roots since a walk passed, and every change that could
bring a hard link in makes the next check find it. Real folders, real links, real inotify."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd import inotify, paths
from mmd.sandbox import links
from mmd.sandbox.links import HardLinkRefused, check_links


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    links.forget()
    yield
    links.forget()


@pytest.fixture(autouse=True)
def not_racy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' folders were made a moment ago: racy (paths.RACY_NS), their listings would never be kept.
    The rule has tests of its own, which put it back."""
    monkeypatch.setattr(paths, "RACY_NS", 0)


class _Coarse:
    """An lstat as on a file system of coarse timestamps (FAT, some NFS servers; ext4 and others before Linux
    6.13, in ticks of a few ms), the test within one tick: every change since *tick* is stamped *tick*."""

    def __init__(self, st: os.stat_result, tick: int) -> None:
        self._st, self._tick = st, tick

    def __getattr__(self, name: str) -> object:
        return getattr(self._st, name)

    @property
    def st_ctime_ns(self) -> int:
        return min(self._st.st_ctime_ns, self._tick)


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders each check looked at (links._folder), cleared by the test as it goes."""
    seen: list[str] = []
    real = links._folder

    def counted(path: str) -> links._Folder | None:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(links, "_folder", counted)
    return seen


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "src" / "deep" / "a.py").write_text("a\n")
    outside.mkdir()
    (outside / "victim").write_text("x\n")
    return project, outside


def test_a_check_after_a_passing_walk_looks_at_no_folder_until_something_changes(tree, walks) -> None:
    project, _ = tree
    check_links([str(project)])
    assert len(walks) == 3  # project, src, deep
    walks.clear()
    for _ in range(3):
        check_links([str(project)])
    assert walks == []
    (project / "src" / "new.txt").write_text("n\n")  # a name made: the next check walks again
    check_links([str(project)])
    assert str(project / "src") in walks


@pytest.mark.parametrize("how", ["linked in", "moved in", "folder replaced", "second name outside"])
def test_every_way_a_link_can_come_in_after_a_passing_walk_is_found(tree, how) -> None:
    project, outside = tree
    if how == "second name outside":
        os.link(project / "src" / "deep" / "a.py", project / "a-too.py")  # two names, both inside: fine
    check_links([str(project)])
    check_links([str(project)])  # settled
    if how == "linked in":
        os.link(outside / "victim", project / "src" / "deep" / "link")
    elif how == "moved in":
        (outside / "pkg").mkdir()
        os.link(outside / "victim", outside / "pkg" / "link")
        (outside / "pkg").rename(project / "src" / "pkg")
    elif how == "folder replaced":
        # src moved away; a new src/deep made under the same path (the old watches follow the old
        # folders), and a link put there.
        (project / "src").rename(project.parent / "old-src")
        (project / "src" / "deep").mkdir(parents=True)
        check_links([str(project)])  # walks the new folders: they must be watched, not taken as known
        os.link(outside / "victim", project / "src" / "deep" / "link")
    else:  # a third name, outside: no event in the project, the linked file's count says it
        os.link(project / "src" / "deep" / "a.py", outside / "a-outside")
    with pytest.raises(HardLinkRefused):
        check_links([str(project)])


def test_too_many_folders_or_a_file_system_without_events_walks_every_time(
    tree, walks, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, _ = tree
    monkeypatch.setattr(links, "MAX_WATCHED", 2)  # three folders
    check_links([str(project)])
    walks.clear()
    check_links([str(project)])
    assert len(walks) == 3
    links.forget()
    monkeypatch.setattr(links, "MAX_WATCHED", 4096)
    monkeypatch.setattr(inotify, "file_systems", lambda: {})  # no folder on a known local file system
    check_links([str(project)])
    walks.clear()
    check_links([str(project)])
    assert len(walks) == 3


def test_a_walk_cut_short_or_refused_is_not_taken_as_an_answer(tree, walks) -> None:
    project, outside = tree
    check_links([str(project)], max_entries=1)  # stops after the first folder
    walks.clear()
    check_links([str(project)], max_entries=1)
    assert walks  # walked again: the first walk did not reach every folder
    os.link(outside / "victim", project / "link")
    for _ in range(2):  # refused every time, never settled
        with pytest.raises(HardLinkRefused):
            check_links([str(project)])


def test_the_watch_descriptor_is_not_inherited(tree) -> None:
    project, _ = tree
    check_links([str(project)])
    quiet = links._quiets[(str(project),)]
    assert quiet._fd >= 0 and not os.get_inheritable(quiet._fd)


def _store_files(outside: Path, count: int) -> list[Path]:
    """*count* files of a package store outside the project, as a package manager keeps them."""
    store = outside / "store"
    store.mkdir()
    files = [store / f"f{i}.py" for i in range(count)]
    for f in files:
        f.write_text("x\n")
    return files


def test_a_venv_uv_linked_from_its_cache_is_named_whole_with_the_way_to_copies(tree) -> None:
    # uv's default on one file system: the venv's files are hard links into uv's cache; every confined call
    # is refused, and no command of the model can change that, so the answer says what the person does.
    project, outside = tree
    site = project / ".venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\nimplementation = CPython\nuv = 0.13.9\n")
    for f in _store_files(outside, 3):
        os.link(f, site / f.name)
    with pytest.raises(HardLinkRefused) as refused:
        check_links([str(project)])
    text = str(refused.value)
    assert text.startswith(
        f"{project / '.venv'} holds 3 hard links into uv's cache, which the sandbox cannot confine: the person "
        "running mm must make it hold copies (`uv sync --reinstall --link-mode=copy`"
    )
    assert "2 names, 1 of them" in text and str(site) in text
    assert "uv sync --reinstall --link-mode=copy" in text and "--sandbox off" in text
    assert f"`uv cache dir`, under sandbox: writable: in {paths.config_dir() / 'config.yaml'})" in text
    assert "do not try to fix it with a command" in text
    with pytest.raises(HardLinkRefused) as refused:  # a daemon started with --config names its own
        check_links([str(project)], config="/srv/mm/config.yaml")
    assert "`uv cache dir`, under sandbox: writable: in /srv/mm/config.yaml)" in str(refused.value)


def test_a_node_modules_pnpm_linked_from_its_store_is_named_at_its_outermost_folder(tree) -> None:
    project, outside = tree
    modules = project / "node_modules"
    inner = modules / ".pnpm" / "is-odd@3.0.1" / "node_modules" / "is-odd"
    inner.mkdir(parents=True)
    (modules / ".modules.yaml").write_text("layoutVersion: 5\n")
    (project / "src" / "deep" / "b.py").write_text("b\n")
    files = _store_files(outside, 2)
    os.link(files[0], inner / "index.js")
    os.link(files[1], inner / "README.md")
    with pytest.raises(HardLinkRefused) as refused:
        check_links([str(project)])
    text = str(refused.value)
    assert text.startswith(
        f"{modules} holds 2 hard links into pnpm's store, which the sandbox cannot confine"
    )
    assert "pnpm config set package-import-method copy --location project && pnpm install --force" in text


def test_links_outside_any_link_farm_name_the_first_and_how_many_more(tree) -> None:
    project, outside = tree
    (project / ".venv").mkdir()
    (project / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")  # made by python -m venv: no farm
    files = _store_files(outside, 3)
    for f, folder in zip(files, [project, project / "src", project / ".venv"], strict=True):
        os.link(f, folder / f.name)
    with pytest.raises(HardLinkRefused) as refused:
        check_links([str(project)])
    text = str(refused.value)
    assert (
        "it is a hard link (the file has 2 names, 1 of them in the folders this call may write) (2 more"
        in text
    )
    assert "cp -p" in text and "uv" not in text and "pnpm" not in text


def _listed_under(folder: Path) -> list[str]:
    """The folders at or below *folder* whose listing the hard-link check keeps."""
    return [p for p in links._walked if p == str(folder) or p.startswith(f"{folder}{os.sep}")]


def _paths_kept() -> int:
    """What the kept listings hold, counted as MAX_KEPT counts them: a path per folder, subfolder, linked file."""
    return sum(1 + len(f.subfolders) + len(f.linked) for f in links._walked.values())


def test_a_deleted_projects_listings_go_when_its_watch_goes_and_all_stay_under_the_cap(
    tmp_path: Path,
) -> None:
    # A daemon's life: one project after another walked by a confined call, then deleted. Only MAX_QUIETS
    # root sets are watched; the listings of the older ones used to stay for good (4,080 of 40 projects).
    projects = [tmp_path / f"project-{n}" for n in range(10)]
    for project in projects:
        for j in range(20):
            (project / "src" / f"pkg{j}").mkdir(parents=True)
        check_links([str(project)])
        shutil.rmtree(project)
    for project in projects[: -links.MAX_QUIETS]:  # their watches were closed, the oldest first
        assert _listed_under(project) == []
    assert 0 < _paths_kept() <= getattr(links, "MAX_KEPT", 0)


def test_the_listings_kept_stay_under_the_cap_and_a_dropped_one_is_walked_again(
    tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, outside = tree
    monkeypatch.setattr(links, "MAX_KEPT", 200, raising=False)
    monkeypatch.setattr(links, "ENABLED", False)  # no watch: every check walks, on the listings alone
    others = []
    for n in range(8):  # trees that stay, each walked once: the least recently used listings go
        other = project.parent / f"other-{n}"
        for j in range(30):
            (other / f"d{j}").mkdir(parents=True)
        check_links([str(project)])
        check_links([str(other)])
        others.append(other)
        assert _paths_kept() <= 200
    assert _listed_under(others[0]) == []
    assert len(_listed_under(project)) == 3  # used at every step: kept
    check_links([str(others[0])])
    assert len(_listed_under(others[0])) == 31  # listed again
    os.link(outside / "victim", project / "src" / "deep" / "link")
    with pytest.raises(HardLinkRefused):
        check_links([str(project)])


@pytest.mark.parametrize("watched", [True, False])
def test_folders_gone_from_a_listed_folder_lose_their_listings(
    tree, monkeypatch: pytest.MonkeyPatch, watched
) -> None:
    # A build makes folders and removes them (or moves them away); the next check finds them gone, with a
    # watch (its events) or without one (the parent's new listing no longer names them).
    project, outside = tree
    if not watched:
        monkeypatch.setattr(links, "MAX_WATCHED", 2)
    for n in range(3):
        build = project / "build" / f"tmp-{n}"
        for j in range(5):
            (build / f"d{j}" / "deeper").mkdir(parents=True)
        check_links([str(project)])
        if n == 1:
            build.rename(outside / "moved")  # gone from here, still on disk elsewhere
        else:
            shutil.rmtree(build)
    check_links([str(project)])
    assert _listed_under(project / "build") == [str(project / "build")]
    assert _paths_kept() == links._held


def test_a_link_made_then_the_folders_mtime_put_back_is_found(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no watch reports a change (here: too many folders), a folder is listed again when its stamp
    changed. It was the mtime, which any writer sets back (utime): a hard link made, then the folder's mtime
    put back, kept the listing from before the link. The ctime cannot be set back."""
    project, outside = tree
    monkeypatch.setattr(links, "MAX_WATCHED", 2)  # three folders: not watched
    check_links([str(project)])
    before = os.stat(project / "src")
    os.link(outside / "victim", project / "src" / "link")
    os.utime(project / "src", ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(project / "src").st_mtime_ns == before.st_mtime_ns
    with pytest.raises(HardLinkRefused):
        check_links([str(project)])


def test_a_link_made_within_the_tick_of_a_listing_is_found(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a file system of coarse timestamps, a link made in the same tick as the folder's listing leaves
    its ctime as it was: a listing whose ctime was that recent (paths.RACY_NS) is not kept."""
    project, outside = tree
    monkeypatch.setattr(paths, "RACY_NS", 2 * 10**9)
    monkeypatch.setattr(links, "MAX_WATCHED", 2)  # not watched: the stamps alone decide
    real, tick = os.lstat, time.time_ns() - 10**8
    monkeypatch.setattr(os, "lstat", lambda path, *a, **k: _Coarse(real(path, *a, **k), tick))
    check_links([str(project)])
    assert str(project / "src") not in links._walked  # changed in this tick: not kept
    stamp = os.lstat(project / "src").st_ctime_ns
    os.link(outside / "victim", project / "src" / "link")
    assert os.lstat(project / "src").st_ctime_ns == stamp  # the same tick: the same stamp
    with pytest.raises(HardLinkRefused):
        check_links([str(project)])
    monkeypatch.setattr(paths, "RACY_NS", 0)  # a stamp long past: the listing is kept
    (project / "src" / "link").unlink()
    check_links([str(project)])
    assert str(project / "src") in links._walked
