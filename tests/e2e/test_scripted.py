"""The scripted model server run as a process, as the end-to-end tier starts it (`python -m mmd.models.scripted`).

The server itself is tested in process in tests/unit/models/test_scripted.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import trio

from mmd.models.openai import OpenAIProvider


async def test_runs_as_a_process(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("responses:\n  - text: from a process\n")
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "mmd.models.scripted", str(script)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(15):
            while not line.endswith(b"\n"):
                line += await proc.stdout.receive_some(1)
        assert line.startswith(b"listening http://127.0.0.1:")
        url = line.decode().split()[1]
        provider = OpenAIProvider(name="scripted/proc", base_url=url + "/v1", model="scripted")
        try:
            result = await provider.complete([], [])
        finally:
            await provider.aclose()
        assert result.text == "from a process"
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(10):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        assert proc.stdout is not None
        await proc.stdout.aclose()


def test_cli_refuses_non_loopback(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("responses: []\n")
    done = subprocess.run(
        [sys.executable, "-m", "mmd.models.scripted", str(script), "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "loopback" in done.stderr
    assert done.stdout == ""
