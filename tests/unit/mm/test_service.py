"""The user units in systemd/ are what mm renders (mm.service).

Installing and verifying them is in tests/e2e/test_systemd.py.
"""

from __future__ import annotations

from mm import service

from ...paths import ROOT


def test_repository_units_are_the_rendered_units():
    for name, text in service.render(service.DEFAULT_EXEC).items():
        assert (ROOT / "systemd" / name).read_text() == text, f"systemd/{name} differs from mm/service.py"
