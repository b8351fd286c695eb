"""Every option of mm has help, and every command's summary fits an 80-column terminal (read from click, in process).

That `mm … --help` runs for each command is in tests/e2e/test_help.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import click
from mm.cli import main

TERMINAL = 80


def _commands(
    cmd: click.Command, path: tuple[str, ...] = ("mm",)
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))


def test_every_option_has_help_and_every_summary_fits():
    for path, cmd in _commands(main):
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"{' '.join(path)} {param.opts[0]} has no help text"
        if isinstance(cmd, click.Group) and cmd.commands:
            # As click lays out a group's command list on an 80-column terminal: a longer
            # summary is cut with "...".
            limit = TERMINAL - 2 - 6 - max(len(name) for name in cmd.commands)
            for name, sub in cmd.commands.items():
                summary = sub.get_short_help_str(limit)
                assert not summary.endswith("..."), f"{' '.join(path)} {name}: summary cut: {summary!r}"
