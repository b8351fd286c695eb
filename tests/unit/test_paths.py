"""The XDG locations and the home folder, as mmd.paths gives them (shared by the daemon and the clients)."""

from __future__ import annotations

from pathlib import Path

from mmd import paths


def test_home_is_path_home_made_once_for_each_value_of_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "one"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    one = paths.home()
    assert one == Path.home() == tmp_path / "one"
    assert paths.home() is one  # kept: Path.home() cost ~40 Python calls, several times a prompt
    monkeypatch.setenv("HOME", str(tmp_path / "two"))  # another $HOME: its own folder at once
    assert paths.home() == tmp_path / "two"
    assert paths.config_dir() == tmp_path / "two" / ".config" / "mm"


def test_a_relative_mm_socket_is_made_absolute_from_the_current_folder(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MM_SOCKET", "s/mmd.sock")
    assert paths.socket_path() == tmp_path / "s" / "mmd.sock"
