"""The self-test: start the built llama-server with a model, get one real completion, stop it.

Standard library only. ``mm local setup`` runs it before it says "ready", ``mm local status --check`` on demand,
``mm local add`` for a new model. Its result is recorded (mmd.local.catalog.write_selftest) so that
``mm local status`` says what the last test saw. Outcomes:

- ``ok``: the server loaded the model and answered the question right;
- ``wrong_answer``: it answered, but not 42 (for the shipped models: a miscompiled build);
- ``crashed``: it died while loading or answering (SIGSEGV, SIGILL: instructions this CPU cannot run);
- ``no_answer``: it did not become healthy, or did not answer, in time;
- ``cpu``: the build needs instructions this CPU lacks (a data folder copied from another machine);
- ``error``: it could not be started at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

import msgspec

from .. import paths
from ..untrusted import check_json
from . import catalog, children, cpu

QUESTION = "What is 12 + 30? Reply with the number only."
EXPECTED = "42"
LOAD_TIMEOUT = 300.0  # seconds for the model to load (a 12B model from a cold disk on 2 cores)
ANSWER_TIMEOUT = 300.0  # seconds for the answer (16 tokens at most)
REBUILD = "mm local setup --rebuild --portable"


class Result(msgspec.Struct):
    outcome: str  # ok | wrong_answer | crashed | no_answer | cpu | error
    detail: str  # one line a person can act on
    answer: str | None = None
    signal: str | None = None
    seconds: float = 0.0
    log: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def record(self) -> dict:
        return {**msgspec.structs.asdict(self), "ok": self.ok, "source": "self-test"}


def describe_exit(returncode: int) -> tuple[str, str | None]:
    """("exited with status 1" | "crashed with SIGSEGV (segmentation fault)", signal name or None)."""
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"was killed by signal {-returncode}", None
        what = signal.strsignal(sig) or sig.name
        return f"crashed with {sig.name} ({what.lower()})", sig.name
    return f"exited with status {returncode}", None


def crash_advice(sig: str | None) -> str:
    """What to do about a server that died while loading."""
    if sig in ("SIGSEGV", "SIGILL", "SIGBUS"):
        return f"the build likely uses CPU instructions this machine cannot run: rebuild it with `{REBUILD}`"
    return f"see the log; if it persists, rebuild with `{REBUILD}`"


def log_path(name: str) -> Path:
    """The log llama-server of local/*name* writes to: the daemon's and the self-test's, appended to."""
    return paths.state_dir() / f"llama-server-{name}.log"


def tail(path: Path, n: int = 12) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def cpu_problem(flags: frozenset[str] | None = None) -> str | None:
    """Why the built server cannot run on this CPU (it needs flags the CPU lacks), or None."""
    built = catalog.server_built()
    if not built:
        return None
    lacking = cpu.missing(built.get("isa") or (), flags)
    if not lacking:
        return None
    return (
        f"llama-server at {catalog.server_binary()} was built for CPU instructions this machine lacks "
        f"({', '.join(lacking)}; copied from another machine?): rebuild it with `{REBUILD}`"
    )


# The variable llama-server reads its API key from: every request but /health must carry the key (a bearer
# token). Given in the environment, which only this user may read, not in argv, which every user may.
KEY_VAR = "LLAMA_API_KEY"


def new_key() -> str:
    """A fresh API key for one llama-server start."""
    return secrets.token_urlsafe(24)


def server_argv(name: str, port: int) -> list[str]:
    """How llama-server serves local/*name*: the daemon and the self-test start it the same way."""
    return [
        str(catalog.server_binary()),
        "-m",
        str(catalog.model_path(name)),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-t",
        str(os.cpu_count() or 1),
        "-c",
        str(catalog.context_size(name)),
        # One slot: the whole window is one session's, and its prompt cache stays that session's. On two
        # cores parallel slots gain nothing (one generation already uses every core) and each would get
        # a fraction of -c; mm reads the window back from /props (docs/local.md#context-budget).
        "-np",
        "1",
        "--jinja",
        *catalog.server_args(name),
    ]


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process *pid* itself holds a TCP socket listening on 127.0.0.1:*port* (None: cannot tell).

    A free port is chosen, closed and then given to llama-server: another local user could bind it in
    between (or after a crash) and receive the prompts. So what answers /health must be our child's own
    socket, found through /proc (the inode of each of its socket descriptors in /proc/net/tcp).
    """
    try:
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        with open(f"/proc/{pid}/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return None
    want = f"0100007F:{port:04X}"
    for row in rows:
        cols = row.split()
        # local_address, state 0A = LISTEN, inode is the 10th column
        if len(cols) > 9 and cols[1] == want and cols[3] == "0A" and cols[9] in inodes:
            return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(name: str, *, expect_answer: bool = True) -> Result:
    """Start llama-server with local/*name*, ask QUESTION, stop it; record and return what happened.

    *expect_answer*: a wrong answer is a failure (shipped models); for an added model any answer passes
    (it may not follow instructions) and a wrong one is only reported.
    """
    problem = cpu_problem()
    result = Result("cpu", problem) if problem else _run(name, expect_answer)
    catalog.write_selftest(name, result.record())
    return result


def _run(name: str, expect_answer: bool) -> Result:
    port = free_port()
    argv = server_argv(name, port)
    key = new_key()
    logfile = log_path(name)
    logfile.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    with open(logfile, "ab") as log:
        log.write(f"--- mm self-test starts {' '.join(argv)}\n".encode())
        log.flush()
        try:
            proc = children.start(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env={KEY_VAR: key})
        except OSError as exc:
            return Result("error", f"could not start {argv[0]}: {exc.strerror or exc}", log=str(logfile))
        try:
            result = _exchange(proc, port, expect_answer, key)
        finally:
            children.stop_group(proc, grace=5.0)
    result.seconds = round(time.monotonic() - t0, 2)
    result.log = str(logfile)
    if result.outcome == "crashed":
        result.detail += f"; its last lines ({logfile}):\n{tail(logfile)}"
    return result


def _exchange(proc: subprocess.Popen[bytes], port: int, expect_answer: bool, key: str) -> Result:
    base = f"http://127.0.0.1:{port}"
    failed = _wait_loaded(proc, port, base)
    if failed is not None:
        return failed
    answer = _ask(proc, base, key)
    if isinstance(answer, Result):
        return answer
    return _judge(answer.strip(), expect_answer)


def _wait_loaded(proc: subprocess.Popen[bytes], port: int, base: str) -> Result | None:
    """None once the server at *base* is healthy, else why it is not."""
    deadline = time.monotonic() + LOAD_TIMEOUT
    while True:
        if proc.poll() is not None:
            how, sig = describe_exit(proc.returncode)
            return Result(
                "crashed", f"llama-server {how} while loading the model; {crash_advice(sig)}", signal=sig
            )
        if _healthy(base):
            if listens_on(proc.pid, port) is False:
                return Result(
                    "error",
                    f"something else answers on 127.0.0.1:{port}, not the llama-server mm started "
                    "(another user took the port?); run the self-test again",
                )
            return None
        if time.monotonic() > deadline:
            return Result("no_answer", f"llama-server was not healthy after {LOAD_TIMEOUT:.0f} s")
        time.sleep(0.25)


def _ask(proc: subprocess.Popen[bytes], base: str, key: str) -> str | Result:
    """The server's answer to QUESTION, or why there is none."""
    import urllib.request  # the self-test's process only: the daemon, which imports this module, never

    body = json.dumps(
        {
            "messages": [{"role": "user", "content": QUESTION}],
            "temperature": 0,
            "max_tokens": 16,
            "seed": 1,
        }
    ).encode()
    req = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(req, timeout=ANSWER_TIMEOUT) as resp:
            raw = resp.read(1 << 20)
        check_json(raw, what="the answer is")  # a ValueError (TooDeep) before json.loads recurses
        reply = json.loads(raw)
        return reply["choices"][0]["message"].get("content") or ""
    except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError, TypeError) as exc:
        if proc.poll() is not None:
            how, sig = describe_exit(proc.returncode)
            return Result("crashed", f"llama-server {how} while answering; {crash_advice(sig)}", signal=sig)
        return Result("no_answer", f"llama-server did not answer the test question: {exc}")


def _judge(answer: str, expect_answer: bool) -> Result:
    if EXPECTED in answer:
        return Result("ok", f"answered {QUESTION!r} with {answer[:40]!r}", answer=answer)
    if not expect_answer and answer:
        return Result("ok", f"answered, though not {EXPECTED}: {answer[:60]!r}", answer=answer)
    return Result(
        "wrong_answer",
        f"answered {QUESTION!r} with {answer[:60]!r}, not {EXPECTED}: the build computes wrong results; "
        f"rebuild it with `{REBUILD}`",
        answer=answer,
    )


def _healthy(base: str) -> bool:
    import urllib.request  # the self-test's process only: the daemon, which imports this module, never

    try:
        with urllib.request.urlopen(f"{base}/health", timeout=5) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False
