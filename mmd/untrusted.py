"""How deep and how big input mm did not write may be, checked before anything decodes it.

A model's answer and its tool-call arguments, a hook's stdout, an MCP server's
or a declared tool's output, a cloned repository's agent file: each may be
hostile. Python's decoders (json, msgspec, PyYAML's composer) recurse once per
level of nesting, so a few kilobytes of ``[[[[…`` raise RecursionError deep in
the daemon, and a YAML alias that repeats an alias that repeats … grows without
bound. Every decoder of such input goes through one of these checks first:

- :func:`check_json` scans the raw text for the nesting of brackets outside
  strings, in C-speed passes (no recursion, linear time), its size, and how
  many values it decodes into (a ``{}`` is 2 bytes of text and 64 of Python
  dict: it is the count, not the bytes, that bounds the memory a decode takes);
- :func:`check_value` walks an already decoded value without recursion;
- :func:`bracket_depths` and :func:`first_value_depth` are the scans for a
  decoder that starts in the middle of a text (``JSONDecoder.raw_decode`` at
  each ``{`` of a model's prose);
- :class:`LimitedLoader` is PyYAML's SafeLoader with a depth limit, a cap on
  the values a file builds (counting each repetition through an alias), and no
  alias to a value that contains it;
- :func:`open_regular` opens a file mm did not write only if it is a regular
  file, without blocking in open(): a FIFO or a device where a file was expected
  (a named pipe a command made, a cloned repository's symbolic link to
  /dev/zero) can neither hang the reader nor feed it without end, and
  :func:`bounded_lines` reads its lines in bounded memory, however long one is;
- :func:`walk` is ``os.walk`` without recursion (a folder chain a thousand deep is a list, not a
  RecursionError), and :func:`first_names` lists a folder's first entries and no more (a folder of a
  million entries is not read whole, nor sorted, to take a few hundred).

Each refusal is a :class:`TooDeep`, :class:`TooLarge` or :class:`YamlLimitError`
whose text names what was too deep or too big, how much, and the limit; the
caller turns it into an answer to the model, an RPC error or a ConfigError
with file and line. The limits are far above real use and far below the point
where Python's recursion limit (1000 frames) is near (docs/protocol.md,
docs/tools.md, docs/hooks.md, docs/mcp.md, docs/cli.md).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterator
from itertools import accumulate
from typing import Any, BinaryIO

import yaml

# Deepest JSON value taken from outside: tool-call arguments, a hook's updatedInput, a
# tool's last line. Real tool schemas nest 2 to 5 levels; every later walk of the value
# (validation, json.dumps, deepcopy) then stays a few hundred frames below the limit.
MAX_DEPTH = 64
# Deepest whole JSON document from outside: a model's answer, a hook's stdout, an MCP
# answer. Room for a value at MAX_DEPTH inside its envelope (a few levels).
MAX_DOCUMENT_DEPTH = 128
# Largest tool-call arguments: a model writes at most about 128k tokens (about 512 KB)
# in one step, so a megabyte is never reached by a real call.
MAX_ARGUMENTS_BYTES = 1024 * 1024
# Deepest nesting of maps and lists in a YAML file; an agent file uses about six levels.
MAX_YAML_DEPTH = 64
# Most values (containers, keys, items) one JSON document from outside may decode into. The text's bytes
# do not bound its memory: a 64 MiB MCP line of `{},{},…` decoded into 20 M dicts, 7 GB. A million values
# (at most ~100 MB of Python objects, and a few hundred ms to build) is far above any real document: a
# listing of 500 tools with their schemas is ~100,000, a model's step a few hundred. A text of at most
# this many characters holds at most this many values (each takes a character), so it is not counted.
MAX_VALUES = 1_000_000
# A text longer than this is decoded in a worker thread, never on the daemon's event loop: decoding a
# megabyte takes a few ms, 64 MB takes seconds in which no other client would be served.
# At least MAX_VALUES: a text decoded on the loop then holds at most MAX_VALUES values, uncounted.
OFF_LOOP_BYTES = 1024 * 1024
# Most values (keys, items, scalars) one YAML file may build, counted again each time an
# alias repeats them. An agent file at the tool cap (256 tools of ~30 values) builds under
# 8,000; PyYAML composes about 15,000 values a second here, so a refusal takes 2 s at most
# (in a worker thread of the daemon).
MAX_YAML_VALUES = 20_000
# The largest integer read from a YAML or JSON file (and the smallest, negated): the store's and msgpack's 64
# bits. No setting takes more, and past 4,300 digits Python refuses to read one (a bare ValueError, with no
# line: an agent file's was an internal error).
MAX_INT = 2**63 - 1

# A JSON string as a decoder reads it: to its first unescaped quote. Possessive, so a
# text of many quotes and backslashes is still scanned in linear time; an unterminated
# string runs to the end of the text (a decoder stops there too).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*+"?', re.DOTALL)
_STRING_BYTES = re.compile(rb'"(?:[^"\\]|\\.)*+"?', re.DOTALL)
# Anything but a bracket, once strings are gone.
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_NOT_BRACKET_BYTES = re.compile(rb"[^\[\]{}]+")
# Whole strings and what lies between them, from a window's start up to a string the window cuts.
_OUTSIDE = re.compile(r'(?:[^"]++|"(?:[^"\\]|\\.)*+")*+', re.DOTALL)
_OUTSIDE_BYTES = re.compile(rb'(?:[^"]++|"(?:[^"\\]|\\.)*+")*+', re.DOTALL)
# Characters of a text whose strings are taken out at once when its values are counted (json_values).
_WINDOW = 1 << 20
# What separates or opens values, once strings are gone (see json_values).
_VALUE_MARKS = ("[", "{", ",", ":")
_VALUE_MARKS_BYTES = (b"[", b"{", b",", b":")
# The tokens that matter to nesting, for a scan that starts in the middle of a text.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"?|[\[\]{}]', re.DOTALL)
# +1 for an opening bracket, -1 for a closing one; str characters and bytes values.
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1, 0x5B: 1, 0x7B: 1, 0x5D: -1, 0x7D: -1}


class TooDeep(ValueError):
    """Input nested deeper than its limit. A ValueError, so "not valid JSON" handlers refuse it too.

    ``what`` starts the text ("the arguments are"), ``depth`` is the depth found.
    """

    def __init__(self, what: str, depth: int, limit: int) -> None:
        self.what = what
        self.depth = depth
        self.limit = limit
        super().__init__(f"{what} nested too deep: {depth:,} levels; the limit is {limit}")


class TooLarge(ValueError):
    """Input larger than its limit; ``what`` starts the text, ``size`` and ``limit`` are in bytes."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(f"{what} too large: {size:,} bytes; the limit is {limit:,} bytes")


class TooMany(ValueError):
    """Input that decodes into more values than its limit; ``what`` starts the text, ``count`` is an upper
    bound of the values found (exact for well-formed JSON but for empty containers)."""

    def __init__(self, what: str, count: int, limit: int) -> None:
        self.what = what
        self.count = count
        self.limit = limit
        super().__init__(f"{what} too big once decoded: more than {limit:,} values, the limit")


def json_values(data: str | bytes | bytearray, *, stop_past: int | None = None) -> int:
    """At most how many values (containers, object keys, array items and member values) the JSON text
    *data* decodes into: one, plus its commas, colons and opening brackets outside strings, less its empty
    ``{}`` and ``[]`` (exact for JSON without spaces inside empty brackets, more otherwise). With
    *stop_past*, the count stops early once past it (the result is then only more than *stop_past*).

    C-speed counts, no recursion. When the count with the strings' characters is at most *stop_past*, it is
    the answer; else strings are taken out a window of _WINDOW characters at a time (a window ends before a
    string it cuts; a string longer than a window is skipped whole), so one long string of commas is not
    counted as values, and a text of 10 M short strings costs a window's pieces of memory, not 1.5 GB.

    Errors: none.
    """
    marks = _VALUE_MARKS if isinstance(data, str) else _VALUE_MARKS_BYTES
    count = 1 + sum(map(data.count, marks))  # type: ignore[arg-type]
    if stop_past is not None and count <= stop_past:
        return count
    if isinstance(data, str):
        string, outside, empty, scalar = _STRING, _OUTSIDE, ("{}", "[]"), "0"
    else:
        string, outside, empty, scalar = _STRING_BYTES, _OUTSIDE_BYTES, (b"{}", b"[]"), b"0"
    count, pos, size = 1, 0, len(data)
    while pos < size:
        safe = outside.match(data, pos, min(pos + _WINDOW, size)).end()  # type: ignore[union-attr]
        if safe == pos:  # a string that runs past the window (or to the end: a decoder fails there)
            pos = string.match(data, pos).end()  # type: ignore[union-attr]
            continue
        bare: Any = string.sub(scalar, data[pos:safe])  # a scalar each: `[""]` is not empty
        count += sum(map(bare.count, marks)) - sum(map(bare.count, empty))
        pos = safe
        if stop_past is not None and count > stop_past:
            break
    return count


def json_depth(data: str | bytes | bytearray) -> int:
    """How deeply the JSON text *data* nests arrays and objects (``[]`` is 1, a scalar 0).

    Brackets inside strings do not count. For a text that is not valid JSON
    the result is at least as deep as any decoder reading it from its start
    gets before it fails. Linear time, no recursion.

    Errors: none.
    """
    is_text = isinstance(data, str)
    opening = data.count("[") + data.count("{") if is_text else data.count(b"[") + data.count(b"{")
    if opening == 0:
        return 0
    if is_text:
        brackets: Any = _NOT_BRACKET.sub("", _STRING.sub("", data))
    else:
        brackets = _NOT_BRACKET_BYTES.sub(b"", _STRING_BYTES.sub(b"", data))
    if not brackets:
        return 0
    return max(0, max(accumulate(map(_STEP.__getitem__, brackets))))


def check_json(
    data: str | bytes | bytearray,
    *,
    what: str = "the JSON is",
    max_depth: int = MAX_DOCUMENT_DEPTH,
    max_bytes: int | None = None,
    max_values: int = MAX_VALUES,
) -> None:
    """Refuse the JSON text *data* before decoding it if it is too big, nests too deep, or decodes into
    more than *max_values* values.

    Cheap when it passes: a text with at most *max_depth* opening brackets is
    not scanned further, nor one of at most *max_values* characters counted.

    Errors:
        TooLarge: longer than *max_bytes* (UTF-8) when given.
        TooMany: more than *max_values* values (see json_values).
        TooDeep: nested deeper than *max_depth*, with the depth found.
    """
    if max_bytes is not None:
        size = text_bytes(data)
        if size > max_bytes:
            raise TooLarge(what, size, max_bytes)
    check_values(data, what=what, max_values=max_values)
    is_text = isinstance(data, str)
    opening = data.count("[") + data.count("{") if is_text else data.count(b"[") + data.count(b"{")
    if opening <= max_depth:
        return
    depth = json_depth(data)
    if depth > max_depth:
        raise TooDeep(what, depth, max_depth)


def check_values(
    data: str | bytes | bytearray, *, what: str = "the JSON is", max_values: int = MAX_VALUES
) -> None:
    """Refuse the JSON text *data* if it decodes into more than *max_values* values; a text of at most
    that many characters is not even counted (each value takes one).

    Errors: TooMany.
    """
    if len(data) > max_values and (count := json_values(data, stop_past=max_values)) > max_values:
        raise TooMany(what, count, max_values)


def text_bytes(data: str | bytes | bytearray) -> int:
    """The size of *data* in bytes, a str counted as UTF-8 (encoded only when it is not ASCII).

    Errors: none.
    """
    if not isinstance(data, str) or data.isascii():  # isascii is a flag lookup for a str
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))


def first_value_depth(text: str, start: int, *, stop_past: int) -> tuple[int, int]:
    """How deep the JSON value that starts at *text[start]* nests, and where the scan stopped.

    For decoders that start in the middle of a text (``raw_decode(text, start)``):
    the scan reads strings from *start* as such a decoder does, stops where the
    first value ends, and stops early, with a depth of ``stop_past + 1``, once
    deeper than *stop_past*. Returns ``(depth, offset after the last token
    read)``. Time proportional to the tokens read, no recursion.

    Errors: none.
    """
    start = len(text) - len(text[start:].lstrip(" \t\r\n")) if text[start : start + 1].isspace() else start
    if text[start : start + 1] not in ("[", "{", '"'):
        return 0, start  # a number, true, false, null: no nesting (or not JSON)
    depth = deepest = 0
    stop = start
    for match in _TOKEN.finditer(text, start):
        char = text[match.start()]
        stop = match.end()
        if char in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop_past:
                    break
        elif char in "]}":
            depth -= 1
            if depth <= 0:
                break
        elif depth == 0:  # a string is the whole value
            break
    return deepest, stop


def bracket_depths(text: str) -> dict[int, int]:
    """For each ``[`` and ``{`` outside strings, how deep the value it opens nests.

    One pass over the whole text: where a decoder started at such a bracket
    reads strings just as a decoder started at the beginning does, so the
    depth of every start is known at once. A closing bracket closes the
    innermost open one whatever its kind (a decoder would fail there), and a
    bracket never closed counts what follows it. Time linear in the number of
    strings and brackets, no recursion.

    Errors: none.
    """
    depths: dict[int, int] = {}
    open_: list[list[int]] = []  # [offset, depth below so far], innermost last
    for match in _TOKEN.finditer(text):
        char = text[match.start()]
        if char in "[{":
            open_.append([match.start(), 1])
        elif char in "]}" and open_:
            offset, depth = open_.pop()
            depths[offset] = depth
            if open_ and open_[-1][1] <= depth:
                open_[-1][1] = depth + 1
    while open_:
        offset, depth = open_.pop()
        depths[offset] = depth
        if open_ and open_[-1][1] <= depth:
            open_[-1][1] = depth + 1
    return depths


def value_depth(value: Any, *, stop_past: int | None = None) -> int:
    """How deeply a decoded value nests lists, tuples and dicts (``[]`` is 1, a scalar 0).

    Walks with its own stack, not recursion; with *stop_past* it returns as
    soon as the depth passes it (which also ends the walk of a value that
    contains itself).

    Errors: none.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
            if stop_past is not None and deepest > stop_past:
                return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list | tuple))
    return deepest


def check_value(value: Any, *, what: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse a decoded value nested deeper than *max_depth*.

    Errors: TooDeep, with the exact depth.
    """
    depth = value_depth(value, stop_past=None)
    if depth > max_depth:
        raise TooDeep(what, depth, max_depth)


# -- YAML -----------------------------------------------------------------------------------


class YamlLimitError(yaml.MarkedYAMLError):
    """A YAML file that breaks one of :class:`LimitedLoader`'s limits.

    ``problem`` says which and how much, ``problem_mark`` where (its ``line``
    is 0-based), ``hint`` what to do.
    """

    def __init__(self, problem: str, mark: Any, hint: str) -> None:
        super().__init__(problem=problem, problem_mark=mark)
        self.hint = hint


class LimitedLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader that refuses, with the line, before a file can exhaust the daemon.

    - maps and lists nested deeper than MAX_YAML_DEPTH, counting what an alias
      brings in at the depth where it is used;
    - more than MAX_YAML_VALUES values built in all, each alias counted for
      every value it repeats (a "billion laughs" file stops at the first
      alias past the cap, after a few kilobytes of work);
    - an alias to a map or list that contains it (a cycle no value can hold);
    - a scalar Python cannot build (an integer past MAX_INT, a date that is none: ``2023-02-30``),
      as a ConstructorError with its line where PyYAML raised a bare ValueError.

    Use it with ``yaml.compose(text, Loader=LimitedLoader)`` or ``yaml.load``; a Loader made with no text
    (``LimitedLoader("")``) builds values from nodes composed elsewhere with the same checks.
    """

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._open_anchors: set[str] = set()
        self._extents: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth) of its subtree

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if event.anchor in self._open_anchors:
                raise YamlLimitError(
                    f"the alias *{event.anchor} refers to itself (to the value that contains it)",
                    event.start_mark,
                    "write the value out instead of referring to itself",
                )
            values, depth = self._extent(node)
            self._count(values, event.start_mark, alias=event.anchor)
            if self._depth + depth > MAX_YAML_DEPTH:
                raise self._too_deep(event.start_mark, alias=event.anchor)
            return node
        self._count(1, event.start_mark)
        container = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
        if not container:
            return super().compose_node(parent, index)
        if self._depth >= MAX_YAML_DEPTH:
            raise self._too_deep(event.start_mark)
        self._depth += 1
        if event.anchor is not None:
            self._open_anchors.add(event.anchor)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            self._open_anchors.discard(event.anchor)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except ValueError as exc:  # from Python, building one scalar: with no line of its own
            raise yaml.constructor.ConstructorError(
                None, None, f"{exc}{_quoted(node)}", node.start_mark
            ) from None

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            value = super().construct_yaml_int(node)
        except ValueError:  # Python reads at most 4,300 decimal digits
            value = None
        if value is None or not -MAX_INT <= value <= MAX_INT:
            raise yaml.constructor.ConstructorError(None, None, str(IntTooLarge(node.value)), node.start_mark)
        return value

    def _count(self, values: int, mark: Any, alias: str | None = None) -> None:
        self._values += values
        if self._values > MAX_YAML_VALUES:
            through = f" (the alias *{alias} here repeats {values:,} values)" if alias else ""
            raise YamlLimitError(
                f"more than {MAX_YAML_VALUES:,} values in the file{through}; the limit is {MAX_YAML_VALUES:,}",
                mark,
                "write the file out with fewer values and fewer aliases; "
                "an agent file or config is written by hand",
            )

    def _too_deep(self, mark: Any, alias: str | None = None) -> YamlLimitError:
        through = f" (through the alias *{alias})" if alias else ""
        return YamlLimitError(
            f"maps and lists nested more than {MAX_YAML_DEPTH} levels deep{through}; "
            f"the limit is {MAX_YAML_DEPTH}",
            mark,
            "flatten the structure",
        )

    def _extent(self, node: yaml.Node) -> tuple[int, int]:
        # Recursion is bounded: every node composed so far nests at most MAX_YAML_DEPTH.
        key = id(node)
        if key not in self._extents:
            if isinstance(node, yaml.ScalarNode):
                self._extents[key] = (1, 0)
            else:
                pairs = node.value if isinstance(node, yaml.MappingNode) else [(item,) for item in node.value]
                parts = [self._extent(child) for pair in pairs for child in pair]
                self._extents[key] = (1 + sum(v for v, _ in parts), 1 + max((d for _, d in parts), default=0))
        return self._extents[key]


LimitedLoader.add_constructor("tag:yaml.org,2002:int", LimitedLoader.construct_yaml_int)


def _quoted(node: yaml.Node) -> str:
    """` ("2023-02-30")`: a scalar's text for an error, cut short; nothing for a map or list."""
    if not isinstance(node, yaml.ScalarNode):
        return ""
    text = node.value if len(node.value) <= 40 else node.value[:39] + "…"
    return f" ({text!r})"


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` within :class:`LimitedLoader`'s limits.

    Errors: yaml.YAMLError for invalid YAML; YamlLimitError (one of them) for a limit.
    """
    return yaml.load(text, Loader=LimitedLoader)  # a SafeLoader subclass: no arbitrary objects


class DuplicateKey(ValueError):
    """A JSON object names *key* twice: json keeps the last silently, so which one counts is a guess."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} appears twice")
        self.key = key


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads(object_pairs_hook=...)``: the object, or DuplicateKey for a key that comes twice."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


class IntTooLarge(ValueError):
    """A JSON file's integer past MAX_INT; ``text`` is how it is written."""

    def __init__(self, text: str) -> None:
        super().__init__(
            f"an integer of {len(text):,} characters, past 64 bits (the most is {MAX_INT:,}); no setting takes "
            "one that large: write a smaller number, or quote it if it is text"
        )
        self.text = text


def bounded_int(text: str) -> int:
    """``json.loads(parse_int=...)``: the integer *text*, or IntTooLarge past MAX_INT (read before Python's
    own limit of 4,300 digits refuses it with a bare ValueError)."""
    value = int(text) if len(text) <= 20 else None  # 2**63 has 19 digits, and a sign
    if value is None or not -MAX_INT <= value <= MAX_INT:
        raise IntTooLarge(text)
    return value


def line_of(text: str, found: str) -> int | None:
    """The line of *text* where *found* first appears (1-based), or None."""
    at = text.find(found)
    return text.count("\n", 0, at) + 1 if at >= 0 else None


class NotRegularFile(OSError):
    """A path that names a FIFO, a device, a socket or a folder where a file was expected."""


_KINDS = (
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """*path* (a symbolic link followed) opened for reading, if it is a regular file.

    The open is non-blocking: opening a FIFO for reading waits for a writer, and a device may wait too,
    so the kind is checked on the open descriptor, which is then made blocking again (a regular file
    ignores the flag anyway).

    Errors: NotRegularFile (its strerror says what the path is instead); OSError from the open.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a file")
            raise NotRegularFile(errno.EINVAL, f"not a regular file but {kind}", os.fspath(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_at_most(f: BinaryIO, limit: int, size: int | None = None) -> bytes:
    """The bytes of the open file *f*, *limit* + 1 at most (one past the limit tells the caller the file is
    too big), read into a buffer of the file's size: ``f.read(limit + 1)`` allocates limit + 1 bytes whatever
    the file holds (256 KiB for each 3 KB SKILL.md a prompt reads, 16 MiB for each edit), an mmap and an
    munmap in a process of several threads. A file that grew since it was looked at, or one that says it
    holds nothing (those of /proc), is read on to the limit. *size*: the file's size as the caller's own
    fstat gave it (None: looked at here).

    Errors: OSError from the read.
    """
    if size is None:
        size = os.fstat(f.fileno()).st_size
    raw = f.read(min(size, limit) + 1)
    if size < len(raw) <= limit:  # more than it said it held: read on, to one past the limit
        raw += f.read(limit + 1 - len(raw))
    return raw


# UTF-8 continuation bytes: a line's characters are its bytes less these.
_CONTINUATION = bytes(range(0x80, 0xC0))
_SKIP_CHUNK = 1 << 16


def bounded_lines(f: BinaryIO, most: int, chunk: int = _SKIP_CHUNK) -> Iterator[tuple[bytes, int]]:
    """Each line of *f*, split at LF only, without its LF (nor the CR of a CRLF), cut to *most* bytes, with
    its whole length in characters (UTF-8): a line of any length costs *most* bytes of memory (and the
    rest of a longer one is counted *chunk* bytes at a time).

    Errors: OSError from the reads.
    """
    while line := f.readline(most + 1):
        ended = line.endswith(b"\n")
        if ended or len(line) <= most:  # the whole line (the last one may have no LF)
            whole = line[:-1].removesuffix(b"\r") if ended else line
            yield whole, _chars(whole)
            continue
        chars, last = _chars(line), line[-1:]
        while rest := f.readline(chunk):
            if rest.endswith(b"\n"):
                body = rest[:-1]
                chars += _chars(body) - (body.endswith(b"\r") or (not body and last == b"\r"))
                break
            chars, last = chars + _chars(rest), rest[-1:]
        yield line[:most], chars


def _chars(data: bytes) -> int:
    return len(data.translate(None, _CONTINUATION))


def walk(top: str | os.PathLike[str]) -> Iterator[tuple[str, list[str], list[str]]]:
    """``os.walk(top)`` without recursion: (folder, subfolder names, other names) of *top* and each folder
    under it, top-down and depth first, in the order ``os.walk`` gives them. The caller may prune the names
    of subfolders in place, as with ``os.walk``; a symbolic link to a folder is named among the subfolders
    and not entered; a folder that cannot be listed is left out (``os.walk``'s default).

    ``os.walk`` recurses once per level in Python 3.11: a project's chain of 1,000 nested folders (a tarball
    ships one in a few kilobytes) raised RecursionError out of the tool that walked it. Here the folders to
    visit wait on a list, so the depth of a tree costs memory, not frames.
    """
    pending = [os.fspath(top)]
    while pending:
        folder = pending.pop()
        dirs: list[str] = []
        other: list[str] = []
        links: set[str] = set()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        is_dir = entry.is_dir()
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else other).append(entry.name)
                    if is_dir and entry.is_symlink():
                        links.add(entry.name)
        except OSError:
            continue
        yield folder, dirs, other
        pending += [os.path.join(folder, name) for name in reversed(dirs) if name not in links]


def first_names(folder: str | os.PathLike[str], most: int) -> list[str]:
    """The names of *folder*'s first *most* entries as the file system lists them (an order that holds while
    the folder is unchanged, not by name), read with ``os.scandir`` and no further: a folder of a million
    entries costs what *most* do, not a listing of all of it sorted. One more than *most* came back says the
    folder holds more.

    Errors: OSError from opening the folder.
    """
    names: list[str] = []
    with os.scandir(folder) as entries:
        for entry in entries:
            names.append(entry.name)
            if len(names) > most:
                break
    return names
