"""What the daemon's first module (mmd/boot.py) promises: no OpenSSL in a daemon that has not used TLS,
and TLS that still works the moment a provider needs it."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .conftest import daemon_pids, run_mm, write_config

OPENSSL_LIBRARIES = ("libssl", "libcrypto")


def openssl_mapped(pid: int) -> list[str]:
    """The lines of the process's memory map that belong to OpenSSL's libraries."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return [line for line in maps.splitlines() if any(lib in line for lib in OPENSSL_LIBRARIES)]


def the_daemon(home: Path) -> int:
    pids = daemon_pids(home)
    assert len(pids) == 1, pids
    return pids[0]


def test_a_daemon_that_ran_a_turn_with_a_tool_has_no_openssl(mm_home, scripted, tmp_path):
    scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi > out.txt"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "out.txt"}}]},
            {"text": "Done."},
        ]
    )
    done = run_mm("--yolo", "-p", "write hi to out.txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Done." in done.stdout
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    # The whole way of a turn (the store, the model request, a checkpointed write call, its
    # idempotency key, the read after it) went by without OpenSSL: about 4.5 MiB of the daemon.
    assert openssl_mapped(the_daemon(mm_home)) == []


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (by the openssl command, as an operator would make one)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_front(certificate: tuple[Path, Path]) -> Iterator[Callable[[str], str]]:
    """``tls_front(url)``: an https:// address that forwards each connection, decrypted, to *url*."""
    listeners: list[socket.socket] = []

    def start(url: str) -> str:
        host, port = url.removeprefix("http://").split(":")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*certificate)
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        threading.Thread(target=_serve, args=(listener, context, (host, int(port))), daemon=True).start()
        return f"https://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    for listener in listeners:
        listener.close()


def _serve(listener: socket.socket, context: ssl.SSLContext, upstream: tuple[str, int]) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_forward, args=(client, context, upstream), daemon=True).start()


def _forward(client: socket.socket, context: ssl.SSLContext, upstream: tuple[str, int]) -> None:
    with client:
        try:
            secure = context.wrap_socket(client, server_side=True)
        except (OSError, ssl.SSLError):
            return
        with secure, socket.create_connection(upstream) as plain:
            back = threading.Thread(target=_pump, args=(plain, secure), daemon=True)
            back.start()
            _pump(secure, plain)
            back.join(30)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


def test_an_https_provider_loads_openssl_when_it_is_used(
    mm_home, scripted, tls_front, certificate, tmp_path, monkeypatch
):
    server = scripted([{"text": "Answered over TLS."}], default=False)
    front = tls_front(server.url)
    write_config(
        mm_home,
        {
            "providers": {"far": {"kind": "openai", "base_url": f"{front}/v1"}},
            "default_model": "far/scripted",
        },
    )
    # The daemon started on demand inherits this: httpx's verified context trusts $SSL_CERT_FILE.
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    done = run_mm("-p", "hello", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Answered over TLS."
    assert server.requests(), "the request did not reach the model behind the TLS front"
    assert openssl_mapped(the_daemon(mm_home)), "the https request went out without OpenSSL?"
