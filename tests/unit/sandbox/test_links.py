"""The hard-link check's watch (mmd/sandbox/links.py, _Quiet): a check skips the walk only while inotify
reported no name made, moved or removed under the roots since a walk passed, and every change that could
bring a hard link in makes the next check find it. Real folders, real links, real inotify."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmd import inotify
from mmd.sandbox import links
from mmd.sandbox.links import HardLinkRefused, check_links


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    links.forget()
    yield
    links.forget()


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
