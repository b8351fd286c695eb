"""Write small GGUF files for tests: the header and metadata mm reads, and no tensors."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

STRING, ARRAY, U32, U64 = 8, 9, 4, 10


def _string(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def _value(v: Any) -> tuple[int, bytes]:
    if isinstance(v, str):
        return STRING, _string(v)
    if isinstance(v, bool):
        return 7, struct.pack("<?", v)
    if isinstance(v, int):
        return U32, struct.pack("<I", v)
    if isinstance(v, list):
        kind = STRING if v and isinstance(v[0], str) else U32
        items = b"".join(_value(x)[1] for x in v)
        return ARRAY, struct.pack("<IQ", kind, len(v)) + items
    raise TypeError(v)


def gguf_bytes(meta: dict[str, Any], *, version: int = 3, raw_entries: list[bytes] = ()) -> bytes:
    body = b""
    for key, value in meta.items():
        kind, data = _value(value)
        body += _string(key) + struct.pack("<I", kind) + data
    body += b"".join(raw_entries)
    count = len(meta) + len(raw_entries)
    return b"GGUF" + struct.pack("<IQQ", version, 0, count) + body


def write_gguf(
    path: Path, *, arch: str = "qwen2", ctx: int | None = 32768, template: str | None = "{{x}}"
) -> Path:
    meta: dict[str, Any] = {
        "general.architecture": arch,
        "general.name": "Tiny Test",
        "general.size_label": "1M",
    }
    if ctx is not None:
        meta[f"{arch}.context_length"] = ctx
    meta["tokenizer.ggml.tokens"] = ["a", "b", "c"]
    if template is not None:
        meta["tokenizer.chat_template"] = template
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes(meta) + b"\0" * 64)
    return path
