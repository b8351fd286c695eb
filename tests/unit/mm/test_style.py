"""Colour or none (clients/mm/style.py): NO_COLOR as no-color.org says, and --no-color.

The same on a real terminal, with `mm -p` and a tool's dim echo, is in tests/e2e/test_chat.py.
"""

from __future__ import annotations

import io

import click
import pytest
from click.testing import CliRunner
from mm import style


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(style, "_off", False)
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.mark.parametrize(("value", "colour"), [(None, True), ("", True), ("1", False), ("0", False)])
def test_no_color_with_any_non_empty_value_turns_colour_off(
    monkeypatch: pytest.MonkeyPatch, value: str | None, colour: bool
) -> None:
    if value is not None:
        monkeypatch.setenv("NO_COLOR", value)
    assert style.enabled(Terminal()) is colour
    assert style.enabled(io.StringIO()) is False  # never colour for a pipe or a file


@style.no_color_option
@click.command()
def painted() -> None:
    click.echo(click.style("red", fg="red"))
    click.echo(f"view: {style.enabled(Terminal())}")


@pytest.mark.parametrize(
    ("args", "env", "colour"),
    [([], {}, True), (["--no-color"], {}, False), ([], {"NO_COLOR": "1"}, False)],
)
def test_the_option_and_the_variable_reach_click_and_the_view(
    args: list[str], env: dict[str, str], colour: bool
) -> None:
    result = CliRunner().invoke(painted, args, env=env, color=True)
    assert result.exit_code == 0, result.output
    assert ("\x1b[31m" in result.output) is colour
    assert f"view: {colour}" in result.output
