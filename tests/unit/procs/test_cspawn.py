"""The C library's posix_spawn through ctypes (mmd/procs/cspawn.py): what a child gets, and what a thread
keeps between its spawns (the converted environment, the file actions) never shows in a later child."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mmd.procs import cspawn

pytestmark = pytest.mark.skipif(not cspawn.AVAILABLE, reason="this C library's posix_spawn lacks setsid")


def spawned(argv: list[str], env: dict[str, str], **kwargs: object) -> str:
    """Run *argv* to its end with stdout on a pipe (stdin and stderr /dev/null); what it printed."""
    r, w = os.pipe()
    null = os.open(os.devnull, os.O_RDWR)
    stdio = [os.dup(null), os.dup(w), os.dup(null)]  # above 2, as the supervisor's are
    try:
        pid = cspawn.spawnp(argv, env, stdio, **kwargs)  # type: ignore[arg-type]
    finally:
        for fd in (w, null, *stdio):
            os.close(fd)
    with os.fdopen(r, "rb") as out:
        text = out.read().decode()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    return text


def test_the_kept_environment_follows_every_change_and_the_varying_variable_is_each_spawns() -> None:
    show = ["sh", "-c", 'echo "$A|$B|$CALL|$TAG"']
    path = {"PATH": os.environ["PATH"]}
    runs = [
        ({**path, "A": "1", "TAG": "x"}, "1|||x"),
        ({**path, "A": "1", "TAG": "y"}, "1|||y"),  # kept: only TAG converted again
        ({**path, "A": "2", "TAG": "z"}, "2|||z"),  # A changed: converted whole
        ({**path, "A": "2", "B": "new", "TAG": "w"}, "2|new||w"),
        ({**path, "A": "2"}, "2|||"),  # no varying name: kept apart
        ({**path, "A": "2", "CALL": "c1", "TAG": "v"}, "2||c1|v"),  # another set of varying names
        ({**path, "A": "2", "B": "new", "TAG": "u"}, "2|new||u"),
        ({**path, "A": "2", "CALL": "c2", "TAG": "t"}, "2||c2|t"),
    ]
    for env, expected in runs:
        assert spawned(show, env, varying=("TAG", "CALL")) == expected + "\n"


def test_each_set_of_descriptors_gets_its_own_file_actions() -> None:
    # The file actions are kept per set of descriptors: a child with other pipes writes to its own.
    outputs = [spawned(["echo", str(i)], {"PATH": os.environ["PATH"]}) for i in range(3)]
    keep = [os.open(os.devnull, os.O_RDONLY) for _ in range(8)]  # the numbers the last pipes had
    try:
        outputs.append(spawned(["echo", "moved"], {"PATH": os.environ["PATH"]}))
    finally:
        for fd in keep:
            os.close(fd)
    assert outputs == ["0\n", "1\n", "2\n", "moved\n"]


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        (["echo", "a\0b"], {}),
        (["echo"], {"A": "a\0b", "TAG": "t"}),
        (["echo"], {"A": "a", "TAG": "t\0"}),
        (["echo"], {"A=B": "a", "TAG": "t"}),
        (["echo"], {"": "a", "TAG": "t"}),
    ],
)
def test_what_the_c_library_cannot_take_is_refused_before_the_spawn(
    argv: list[str], env: dict[str, str]
) -> None:
    with pytest.raises(ValueError, match=r"NUL|illegal"):
        spawned(argv, env, varying=("TAG", "CALL"))


def test_a_program_not_found_names_the_program() -> None:
    with pytest.raises(FileNotFoundError) as err:
        spawned(["/nonexistent/mm-tool"], {})
    assert err.value.filename == "/nonexistent/mm-tool"


def test_kept_file_actions_are_freed_quietly_as_the_interpreter_ends() -> None:
    # A thread's kept actions may be dropped once the module's globals are gone (the main thread's, a daemon
    # thread's at exit): every process that spawned printed "Exception ignored ... NoneType is not callable".
    script = (
        "import os, threading, time\n"
        "from mmd.procs import cspawn\n"
        "def spawn():\n"
        "    r, w = os.pipe()\n"
        "    os.waitpid(cspawn.spawnp(['true'], dict(os.environ), [r, w, w], cspawn.inherit_nothing()), 0)\n"
        "spawn()\n"
        "threading.Thread(target=lambda: (spawn(), time.sleep(100)), daemon=True).start()\n"
        "time.sleep(0.2)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""


@pytest.mark.skipif(
    not cspawn.CLOSEFROM, reason="this C library has no posix_spawn_file_actions_addclosefrom_np"
)
def test_kept_file_actions_are_the_closing_ways_own(monkeypatch: pytest.MonkeyPatch) -> None:
    # Actions kept for a set of descriptors under one way of closing the rest (close_range in the parent: no
    # close action) are not another's (close-from in the child): the descriptor test failed now and then,
    # a spawner thread reusing the first ones after the tests switched ways, and a descriptor left
    # inheritable reached the child.
    leak_r, leak_w = os.pipe()
    os.set_inheritable(leak_r, True)
    code = "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"
    null = os.open(os.devnull, os.O_RDWR)
    out_r, out_w = os.pipe()
    stdio = [os.dup(null), os.dup(out_w), os.dup(null)]
    try:
        monkeypatch.setattr(cspawn, "CLOSEFROM", False)
        os.waitpid(cspawn.spawnp([sys.executable, "-c", "pass"], dict(os.environ), stdio), 0)
        monkeypatch.setattr(cspawn, "CLOSEFROM", True)
        pid = cspawn.spawnp([sys.executable, "-c", code], dict(os.environ), stdio)
        os.waitpid(pid, 0)
    finally:
        for fd in (null, out_w, *stdio, leak_w):
            os.close(fd)
    with os.fdopen(out_r, "rb") as out:
        seen = out.read().decode()
    os.close(leak_r)
    assert seen == "[0, 1, 2, 3]\n"  # its stdio and the listing's own descriptor
