"""Socket activation and readiness notification (mmd.server.sdnotify), in process.

A real mmd activated as systemd does it is in tests/e2e/test_systemd.py.
"""

from __future__ import annotations

import os
import socket

import pytest

from mmd.server.sdnotify import ActivationError, Notifier, activated_socket

# Long enough for a slow CI machine to start Python; a guard against a hang, not a measurement.
RECV_TIMEOUT = 30


def test_activation_variables_for_another_pid_are_ignored_and_removed():
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "x", "HOME": "/"}
    assert activated_socket(env) is None
    assert env == {"HOME": "/"}
    env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "2"}
    with pytest.raises(ActivationError, match="single ListenStream"):
        activated_socket(env)
    assert env == {}


def test_notify_reaches_an_abstract_socket_and_is_taken_from_the_environment():
    name = f"mm-test-notify-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(RECV_TIMEOUT)
        env = {"NOTIFY_SOCKET": "@" + name}
        notifier = Notifier.from_environ(env)
        assert env == {}
        assert notifier.notify("READY=1", "STATUS=serving") is True
        assert sock.recv(4096) == b"READY=1\nSTATUS=serving"
    assert Notifier.from_environ({}).notify("READY=1") is False
