"""Read a GGUF file's metadata (architecture, trained context, chat template) without loading it.

Standard library only. A GGUF file a user names is input mm did not write: every count and length is checked
against the file's size and a cap before anything is allocated, arrays are skipped by seeking (a vocabulary
holds 150,000 strings), and arrays nest at most a few levels. A bad file raises GGUFError saying what and where.

Format (little-endian): magic ``GGUF``, version (u32, 2 or 3), tensor count (u64), metadata count (u64), then
each metadata entry: key (u64 length + UTF-8), value type (u32), value.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import msgspec

MAGIC = b"GGUF"
# Value types: id → (struct format, size) for the fixed-size ones.
_FIXED = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
_STRING, _ARRAY = 8, 9
MAX_ENTRIES = 100_000  # metadata entries (real files have tens to a few hundred)
MAX_KEY = 65_536  # bytes of one key
MAX_STRING = 16 << 20  # bytes of one string value we keep (a chat template is a few KB)
MAX_DEPTH = 4  # arrays inside arrays
# Keys kept; everything else is skipped without being decoded.
_WANTED_SUFFIXES = (".context_length", ".block_count", ".embedding_length")
_WANTED = {
    "general.architecture",
    "general.name",
    "general.size_label",
    "general.file_type",
    "general.parameter_count",
    "tokenizer.chat_template",
}


class GGUFError(ValueError):
    """The file is not a GGUF file mm can read; the message says what was found and where."""


class GGUFInfo(msgspec.Struct, frozen=True):
    version: int
    architecture: str | None
    name: str | None
    size_label: str | None
    context_length: int | None  # the context the model was trained with
    chat_template: str | None
    metadata: dict[str, object]


class _Reader:
    def __init__(self, f: BinaryIO, size: int, path: Path) -> None:
        self.f, self.size, self.path = f, size, path

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: {what} at byte {self.f.tell()}")

    def take(self, n: int) -> bytes:
        if n < 0 or self.f.tell() + n > self.size:
            raise self.fail(f"needs {n} more bytes but the file ends (truncated or not GGUF)")
        return self.f.read(n)

    def skip(self, n: int) -> None:
        if n < 0 or self.f.tell() + n > self.size:
            raise self.fail(f"skips {n} bytes past the end of the file (truncated or not GGUF)")
        self.f.seek(n, 1)

    def fixed(self, kind: int) -> object:
        fmt, n = _FIXED[kind]
        return struct.unpack(fmt, self.take(n))[0]

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def string(self, limit: int, keep: bool) -> str | None:
        n = self.u64()
        if n > self.size:
            raise self.fail(f"a string of {n} bytes in a file of {self.size}")
        if not keep or n > limit:
            self.skip(n)
            return None
        return self.take(n).decode("utf-8", errors="replace")

    def value(self, kind: int, keep: bool, depth: int = 0) -> object:
        if kind in _FIXED:
            if keep:
                return self.fixed(kind)
            self.skip(_FIXED[kind][1])
            return None
        if kind == _STRING:
            return self.string(MAX_STRING, keep)
        if kind == _ARRAY:
            if depth >= MAX_DEPTH:
                raise self.fail(f"arrays nested deeper than {MAX_DEPTH}")
            item, count = self.u32(), self.u64()
            if count > self.size:
                raise self.fail(f"an array of {count} items in a file of {self.size} bytes")
            if item in _FIXED:  # skipped in one seek
                self.skip(count * _FIXED[item][1])
            else:
                for _ in range(count):
                    self.value(item, False, depth + 1)
            return None  # arrays are never kept
        raise self.fail(f"unknown value type {kind}")


def read_info(path: Path) -> GGUFInfo:
    """The metadata of the GGUF file at *path*.

    Errors:
        GGUFError: not a GGUF file, an unsupported version, or a count or length the file cannot hold.
        OSError: the file cannot be opened or read.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        r = _Reader(f, size, path)
        if r.take(4) != MAGIC:
            raise GGUFError(f"{path}: not a GGUF file (it does not start with the bytes 'GGUF')")
        version = r.u32()
        if version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {version}; mm reads versions 2 and 3")
        r.u64()  # tensors
        entries = r.u64()
        if entries > MAX_ENTRIES:
            raise r.fail(f"{entries} metadata entries (at most {MAX_ENTRIES})")
        meta: dict[str, object] = {}
        for _ in range(entries):
            raw = r.string(MAX_KEY, True)
            if raw is None:
                raise r.fail(f"a metadata key longer than {MAX_KEY} bytes")
            kind = r.u32()
            keep = raw in _WANTED or raw.endswith(_WANTED_SUFFIXES)
            value = r.value(kind, keep)
            if keep and value is not None:
                meta[raw] = value
    arch = meta.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    ctx = meta.get(f"{arch}.context_length") if arch else None
    template = meta.get("tokenizer.chat_template")
    return GGUFInfo(
        version=version,
        architecture=arch,
        name=_str(meta.get("general.name")),
        size_label=_str(meta.get("general.size_label")),
        context_length=ctx if isinstance(ctx, int) and not isinstance(ctx, bool) and ctx > 0 else None,
        chat_template=_str(template),
        metadata=meta,
    )


def _str(v: object) -> str | None:
    return v if isinstance(v, str) else None
