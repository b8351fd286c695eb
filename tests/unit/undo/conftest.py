"""What the undo tests share: the git processes a shadow repository runs, counted."""

from __future__ import annotations

import pytest

from mmd.undo import Shadow


@pytest.fixture
def git_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The subcommand of each git any Shadow runs from now on (``add``, ``write-tree``, ...), in order."""
    ran: list[str] = []
    git = Shadow.git

    async def counted(self, *args, **kw):
        ran.append(args[0])
        return await git(self, *args, **kw)

    monkeypatch.setattr(Shadow, "git", counted)
    return ran
