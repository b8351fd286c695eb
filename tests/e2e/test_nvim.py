"""Neovim speaks our framing natively: a real headless Neovim completes the handshake."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from mmd import __version__
from mmd.rpc import PROTOCOL_VERSION

from .conftest import socket_of

pytestmark = pytest.mark.skipif(
    shutil.which("nvim") is None, reason="Neovim is not installed (Debian: neovim)"
)

LUA = """
local ch = vim.fn.sockconnect('pipe', os.getenv('MM_TEST_SOCKET'), {rpc = true})
local out = {}
out.handshake_ok, out.handshake = pcall(vim.rpcrequest, ch, 'handshake',
  {protocol = %d, client = 'nvim', version = 'test'})
out.status_ok, out.status = pcall(vim.rpcrequest, ch, 'daemon.status', vim.empty_dict())
out.bad_ok, out.bad = pcall(vim.rpcrequest, ch, 'no.such.method', vim.empty_dict())
local f = io.open(os.getenv('MM_TEST_OUT'), 'w')
f:write(vim.fn.json_encode(out))
f:close()
vim.cmd('qall!')
"""


def test_neovim_sockconnect_rpc_handshake(mm_home, daemon, tmp_path):
    script = tmp_path / "handshake.lua"
    script.write_text(LUA % PROTOCOL_VERSION)
    out = tmp_path / "out.json"
    env = {
        "MM_TEST_SOCKET": str(socket_of(mm_home)),
        "MM_TEST_OUT": str(out),
        "HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
    }
    subprocess.run(
        ["nvim", "--headless", "-u", "NONE", "-i", "NONE", "-n", "-c", f"luafile {script}"],
        env=env,
        timeout=30,
        check=True,
        capture_output=True,
    )
    result = json.loads(out.read_text())
    assert result["handshake_ok"] is True
    assert result["handshake"]["daemon_version"] == __version__
    assert result["handshake"]["protocol"] == PROTOCOL_VERSION
    assert result["status_ok"] is True and result["status"]["pid"] == daemon.pid
    assert result["bad_ok"] is False and 'no method "no.such.method"' in result["bad"]
