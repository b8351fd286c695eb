"""mmd/rpc/trust.py: a folder of mm's that cannot be made or looked into is reported with what to do."""

from __future__ import annotations

import os

import pytest

from mmd.rpc import trust


def test_a_file_on_the_way_is_named(tmp_path):
    (tmp_path / "state").write_text("")
    with pytest.raises(trust.UnusablePath) as err:
        trust.ensure_private_dir(tmp_path / "state" / "mm", fix=trust.STATE_FIX)
    said = str(err.value)
    assert f"cannot make the folder {tmp_path}/state/mm: {tmp_path}/state is a file, not a folder" in said
    assert said.endswith(trust.STATE_FIX)


def test_a_file_deeper_on_the_way_is_named(tmp_path):
    (tmp_path / "home").write_text("")
    with pytest.raises(trust.UnusablePath) as err:
        trust.ensure_private_dir(tmp_path / "home" / ".local" / "state" / "mm", fix=trust.STATE_FIX)
    assert f"{tmp_path}/home is a file, not a folder" in str(err.value)


def test_looking_into_a_folder_under_a_file_is_reported(tmp_path):
    (tmp_path / "run").write_text("")
    with pytest.raises(trust.UnusablePath) as err:
        trust.check_dir(tmp_path / "run" / "mm")
    assert f"{tmp_path}/run is a file, not a folder" in str(err.value)
    assert str(err.value).endswith(trust.SOCKET_FIX)


def test_a_missing_folder_is_still_absent(tmp_path):
    with pytest.raises(FileNotFoundError):
        trust.check_dir(tmp_path / "nothing" / "mm")


@pytest.mark.skipif(os.getuid() == 0, reason="root may write any folder")
def test_a_folder_you_may_not_write_is_reported(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(trust.UnusablePath) as err:
            trust.ensure_private_dir(locked / "mm", fix=trust.STATE_FIX)
    finally:
        locked.chmod(0o700)
    assert f"cannot make or use the folder {locked}/mm (Permission denied): make it writable" in str(
        err.value
    )


def test_an_unusable_path_is_reported_where_an_unsafe_one_is():
    assert issubclass(trust.UnusablePath, trust.UnsafePath)
