"""Reading a GGUF file's metadata: what `mm local add` takes from it, and files it must refuse."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from mmd.local.gguf import GGUFError, read_info

from ...gguf_files import gguf_bytes, write_gguf


def test_architecture_context_and_template_are_read(tmp_path: Path) -> None:
    info = read_info(
        write_gguf(tmp_path / "m.gguf", arch="llama", ctx=4096, template="{% for m in messages %}")
    )
    assert info.architecture == "llama" and info.context_length == 4096
    assert info.chat_template == "{% for m in messages %}"
    assert info.name == "Tiny Test" and info.size_label == "1M"
    assert "tokenizer.ggml.tokens" not in info.metadata  # arrays are skipped, never kept


def test_a_file_without_context_or_template(tmp_path: Path) -> None:
    info = read_info(write_gguf(tmp_path / "m.gguf", ctx=None, template=None))
    assert info.context_length is None and info.chat_template is None


def test_not_gguf_wrong_version_and_truncation_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "x.gguf"
    f.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_info(f)
    f.write_bytes(gguf_bytes({"a": "b"}, version=9))
    with pytest.raises(GGUFError, match="version 9"):
        read_info(f)
    whole = gguf_bytes({"general.architecture": "qwen2", "qwen2.context_length": 8})
    f.write_bytes(whole[:-3])
    with pytest.raises(GGUFError, match="truncated"):
        read_info(f)


@pytest.mark.parametrize(
    "entry",
    [
        # a string claiming 2^60 bytes
        struct.pack("<Q", 1) + b"k" + struct.pack("<IQ", 8, 1 << 60),
        # an array claiming 2^62 items of u64: skipped by seeking, refused for the size
        struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 10, 1 << 62),
        # an unknown value type
        struct.pack("<Q", 1) + b"k" + struct.pack("<I", 99),
        # a key claiming 2^40 bytes
        struct.pack("<Q", 1 << 40),
    ],
    ids=["huge-string", "huge-array", "unknown-type", "huge-key"],
)
def test_counts_and_lengths_the_file_cannot_hold_are_refused_without_allocating(
    tmp_path: Path, entry: bytes
) -> None:
    f = tmp_path / "x.gguf"
    f.write_bytes(gguf_bytes({}, raw_entries=[entry]) + b"\0" * 32)
    with pytest.raises(GGUFError):
        read_info(f)


def test_arrays_nested_deeply_are_refused(tmp_path: Path) -> None:
    nested = struct.pack("<IQ", 9, 1) * 50 + struct.pack("<IQ", 4, 0)
    f = tmp_path / "x.gguf"
    f.write_bytes(gguf_bytes({}, raw_entries=[struct.pack("<Q", 1) + b"k" + struct.pack("<I", 9) + nested]))
    with pytest.raises(GGUFError, match="nested deeper"):
        read_info(f)


def test_too_many_entries_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "x.gguf"
    f.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 50))
    with pytest.raises(GGUFError, match="metadata entries"):
        read_info(f)
