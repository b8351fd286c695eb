"""mmd.deferred.Deferred: a module imported on the first use of one of its names."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from mmd.deferred import Deferred


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module that counts how many times it was executed (in a file the test owns)."""
    name = f"deferred_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        "import builtins\n"
        "builtins.executions = getattr(builtins, 'executions', 0) + 1\n"
        "VALUE = 42\n"
        "class Thing:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    import builtins

    builtins.__dict__.pop("executions", None)


def executions() -> int:
    import builtins

    return getattr(builtins, "executions", 0)


def test_an_import_statement_does_not_load_it(module: str) -> None:
    stand_in = Deferred(module)
    sys.modules[module] = stand_in
    imported = __import__(module)  # what `import name` does
    assert imported is stand_in
    assert executions() == 0


def test_the_first_name_used_loads_it_once_and_later_imports_get_the_real_module(module: str) -> None:
    stand_in = Deferred(module)
    sys.modules[module] = stand_in
    assert stand_in.VALUE == 42
    assert executions() == 1
    real = sys.modules[module]
    assert real is not stand_in
    assert __import__(module) is real
    # Whoever holds the stand-in sees the real module's objects, with no further execution.
    assert stand_in.Thing is real.Thing
    assert isinstance(real.Thing(), stand_in.Thing)
    assert executions() == 1


def test_threads_using_it_at_once_load_it_once(module: str) -> None:
    stand_in = Deferred(module)
    sys.modules[module] = stand_in
    start = threading.Barrier(8)
    seen: list[object] = []

    def use() -> None:
        start.wait()
        seen.append(stand_in.Thing)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert executions() == 1
    assert len(seen) == 8 and len({id(thing) for thing in seen}) == 1


def test_a_missing_name_is_an_attribute_error(module: str) -> None:
    stand_in = Deferred(module)
    sys.modules[module] = stand_in
    with pytest.raises(AttributeError):
        stand_in.no_such_name  # noqa: B018
