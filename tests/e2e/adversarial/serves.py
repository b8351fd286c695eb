"""The check every adversarial case ends with: the daemon still answers and still runs a turn."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import run_mm


def assert_daemon_serves(home: Path, *, agent: Path | None = None) -> None:
    """After hostile input: `mm daemon status` answers and `mm -p` runs a turn to its end.

    Uses a fresh scripted model (no server needed: ``scripted:`` models are served inside the daemon), so
    it works whatever model config the case set up.
    """
    status = run_mm("daemon", "status", cwd=home / "work")
    assert status.returncode == 0, f"the daemon no longer answers: {status.stderr}"
    probe = home / "probe"
    probe.mkdir(exist_ok=True)
    (probe / "script.yaml").write_text(json.dumps({"responses": [{"text": "still serving"}]}))
    (probe / "agent.yaml").write_text("model: scripted:script.yaml\n")
    result = run_mm(
        "-p", "are you there?", "--agent", str(agent or probe / "agent.yaml"), cwd=probe, timeout=60
    )
    assert result.returncode == 0, f"the daemon no longer runs a turn: {result.stderr}"
    assert "still serving" in result.stdout
