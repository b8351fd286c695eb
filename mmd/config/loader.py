"""YAML files to msgspec Structs, with errors that name the file, the line and the field.

:func:`parse` composes the YAML into nodes, which remember their lines, and
builds plain Python values plus a map from each field path to its line.
:meth:`Document.convert` then checks the values against the Struct type
field by field, so an error knows exactly where it is (msgspec's own errors
do not name the key inside a ``dict``), and finally lets msgspec build the
Struct. Each message says what was expected and what was found, and, where
it can, what to do: the closest known key, the allowed values.

A Struct may list fields that are not keys of the file, but set by its
loader (where the file was read from), in a ``set_by_loader`` ClassVar.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import re
import types
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec
import yaml

from .. import paths
from ..kept import Kept
from ..untrusted import LimitedLoader, NotRegularFile, YamlLimitError, open_regular, read_at_most

T = TypeVar("T")
# Where a value sits in a document: keys and list indexes from the top.
FieldPath = tuple[Any, ...]

# A key shown after a dot in a field path; anything else is shown quoted in brackets.
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")
# Longest string quoted back in a "found ..." text.
_QUOTE_MAX = 40
# The tag of YAML's merge key, `<<`.
_MERGE_TAG = "tag:yaml.org,2002:merge"
# Largest agent file or config.yaml read. Both are written by hand (the biggest real ones are a
# few kilobytes); a bigger file is refused before it is parsed, which takes ~1 s per 100 KB.
MAX_FILE_BYTES = 1024 * 1024
# How the leaf types read in "expected ..." texts.
_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    type(None): "nothing",
}
# The same, for the items of a list.
_PLURALS = {str: "strings", int: "integers", float: "numbers", bool: "true/false values"}


class ConfigError(Exception):
    """A configuration file (or value) that mm cannot use.

    ``file`` and ``line`` (1-based, None when it does not apply) say where;
    ``field`` is the dotted path of the offending value (``providers.local.kind``,
    ``tools[0].name``, "" for the whole file); ``problem``, ``expected``,
    ``found`` and ``hint`` are short texts that ``str()`` joins into one line:
    ``mm.yaml:3: model: expected a string like "provider/model", found an integer (3)``.
    """

    def __init__(
        self,
        *,
        file: str | os.PathLike[str],
        line: int | None,
        field: str,
        found: str | None = None,
        expected: str | None = None,
        hint: str | None = None,
        problem: str | None = None,
    ) -> None:
        self.file = str(file)
        self.line = line
        self.field = field
        self.found = found
        self.expected = expected
        self.hint = hint
        self.problem = problem
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        head = ": ".join(part for part in (where, self.field) if part)
        text = "; ".join(part for part in (self.problem, self._expectation()) if part)
        hint = f" — {self.hint}" if self.hint else ""
        return f"{head}: {text}{hint}" if head else f"{text}{hint}"

    def _expectation(self) -> str:
        if self.expected and self.found:
            return f"expected {self.expected}, found {self.found}"
        if self.expected:
            return f"expected {self.expected}"
        return f"found {self.found}" if self.found else ""


def dotted(path: FieldPath) -> str:
    """``("providers", "local", "kind")`` → ``providers.local.kind``; ``("tools", 0)`` → ``tools[0]``.

    Errors: none.
    """
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and _PLAIN_KEY.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return out


def did_you_mean(word: str, choices: Any) -> str | None:
    """``'did you mean "model"?'`` for the closest of ``choices``, or None if none is close.

    Errors: none.
    """
    import difflib  # on first use: 0.1 MiB and 0.6 ms of every daemon start, for a mistake's hint

    close = difflib.get_close_matches(word, [str(c) for c in choices], n=1, cutoff=0.6)
    return f'did you mean "{close[0]}"?' if close else None


def one_of(names: Any) -> str:
    """``one of a, b, c`` for hint texts; the names sorted.

    Errors: none.
    """
    return "one of " + ", ".join(sorted(str(name) for name in names))


def describe(value: Any) -> str:
    """How a found value reads in an error: ``an integer (3)``, ``a string ("abc")``, ``a list``.

    Errors: none.
    """
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a number ({value})"
    if isinstance(value, str):
        short = value if len(value) <= _QUOTE_MAX else value[: _QUOTE_MAX - 1] + "…"
        return f"a string ({json.dumps(short, ensure_ascii=False)})"
    if isinstance(value, datetime.date):
        return f"a date ({value.isoformat()})"
    return {list: "a list", dict: "a map"}.get(type(value), f"a {type(value).__name__}")


def expected(tp: Any) -> str:
    """How a type reads in an error: ``an integer, at least 1``, ``one of "openai", "anthropic"``.

    A ``msgspec.Meta(description=...)`` on the type is used as is.

    Errors: none.
    """
    inner, metas = _unwrap(tp)
    described = _description(metas)
    if described:
        return described
    bounds = _bounds(metas)
    return f"{_expected_inner(inner)}, {bounds}" if bounds else _expected_inner(inner)


class Document:
    """A parsed YAML file: its plain values and the line of each field."""

    def __init__(self, file: str, data: Any, lines: dict[FieldPath, int], digest: str = "") -> None:
        self.file = file
        self.data = data
        self.lines = lines
        self.digest = digest  # of the text parsed (text_digest): what a project's trust is keyed by

    def line(self, path: FieldPath) -> int | None:
        """The line of the field at ``path``, else of its nearest parent that has one.

        Errors: none.
        """
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None

    def error(self, path: FieldPath, **texts: str | None) -> ConfigError:
        """A ConfigError about the field at ``path``; ``texts`` are ConfigError's text arguments.

        Errors: none; it returns the error for the caller to raise.
        """
        return ConfigError(file=self.file, line=self.line(path), field=dotted(path), **texts)

    def refuse_past(self, key: str, limit: int, what: str, hint: str) -> None:
        """Refuse more than *limit* entries in the list under the top-level *key*, before they are checked
        one by one (a list as long as the file allows would be checked, and kept, whole).

        Errors: ConfigError at the line of the first entry past the limit: "N *what*; the limit is L".
        """
        entries = self.data.get(key) if isinstance(self.data, dict) else None
        if isinstance(entries, list) and len(entries) > limit:
            raise self.error(
                (key, limit), problem=f"{len(entries):,} {what}; the limit is {limit}", hint=hint
            )

    def convert(self, type_: type[T]) -> T:
        """Check the values against the Struct ``type_`` and build it; missing keys take defaults.

        Errors: ConfigError for the first value that does not fit, with its line.
        """
        _check(self, self.data, type_, ())
        try:
            return msgspec.convert(self.data, type_)
        except msgspec.ValidationError as e:  # a rule _check does not know; still point at the file
            raise ConfigError(file=self.file, line=self.line(()), field="", problem=str(e)) from None


def text_digest(text: str) -> str:
    """The SHA-256 of *text* as UTF-8, in hex: what ``mm trust`` records of a project's file."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def parse(file: str | os.PathLike[str], text: str | None = None) -> Document:
    """Read and parse the YAML ``file`` (or ``text``, reported as ``file``).

    An empty file, or one holding only comments or ``null``, is an empty map.

    Errors: ConfigError if the file cannot be read, is not a regular file, is
    larger than MAX_FILE_BYTES, is not UTF-8, is not valid YAML (with the
    line), breaks a limit of :class:`~mmd.untrusted.LimitedLoader` (nesting,
    values built through aliases, with the line), or uses a construct mm
    refuses (duplicate keys, non-scalar keys, recursive aliases).
    """
    name = str(file)
    if text is None:
        text = _read(Path(file))
    else:
        raw = text.encode("utf-8", "surrogatepass")
        _check_size(name, raw, len(raw))
    try:
        node = yaml.compose(text, Loader=LimitedLoader)
    except YamlLimitError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else None
        raise ConfigError(file=name, line=line, field="", problem=e.problem, hint=e.hint) from None
    except yaml.YAMLError as e:
        raise _syntax_error(name, text, e) from None
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
        return Document(name, {}, {(): 1}, text_digest(text))
    builder = _Builder(name)
    data = builder.build(node, ())
    builder.lines[()] = node.start_mark.line + 1
    return Document(name, data, builder.lines, text_digest(text))


# What the loaders built from the texts read last (config.yaml, agent files, MCP JSON and Claude settings
# files), by loader, path, $HOME, the loader's other arguments and text: a prompt reads them all again, and
# composing the YAML, building the values and checking them against the Structs cost ~2 ms of CPU a prompt
# for a 250-byte config.yaml. The path and $HOME are in the key because a loader makes relative paths
# absolute from the file's folder and expands ``~``; the whole text is, so an edit is always seen; a text
# that fails is not kept (its error is raised again). What a loader returns is shared by every prompt that
# read the same text: mmd/config's Structs are frozen, and nothing changes their lists or maps (a caller
# given a map to change gets a copy). Bounded (mmd/kept.py): a long text is loaded every time, and the
# entries kept are few, so a cloned repository's agent files cost the daemon little memory. Each weighs its
# text, its key's other strings and LOADED_OVERHEAD for the objects.
LOADED_MAX_TEXT = 16 * 1024  # characters: a longer text is loaded every time
LOADED_BUDGET = 32 * 1024  # characters all the entries kept weigh together
LOADED_OVERHEAD = 512  # characters an entry weighs besides its strings: its key, the value's smallest Struct
LOADED_ENTRIES = 64  # entries kept at most, whatever they weigh


def _weight(key: tuple[Any, str, str, tuple[Hashable, ...], str]) -> int:
    """What an entry of _LOADED counts for against LOADED_BUDGET: its strings' characters and the overhead."""
    _, path, home, args, text = key
    strings = sum(len(a) for a in args if isinstance(a, str))
    return len(path) + len(home) + strings + len(text) + LOADED_OVERHEAD


_LOADED: Kept[tuple[Any, str, str, tuple[Hashable, ...], str], Any] = Kept(
    LOADED_ENTRIES, LOADED_BUDGET, _weight
)


def remembered(
    path: Path,
    load: Callable[..., T],
    *args: Hashable,
    reader: Callable[[str | os.PathLike[str], str], Any] | None = None,
    read: Callable[[Path], str] | None = None,
) -> T:
    """``load(path, reader(path, text), *args)``, or what it returned for the same *load*, path, *args* and
    text before. *read* reads the text (the loader's own: a regular file, UTF-8, within MAX_FILE_BYTES);
    *reader* makes it what *load* takes (:func:`parse`: a Document).

    Errors: those of *read*, *reader* and *load*.
    """
    text = (read or _read)(path)
    key = (load, str(path), os.environ.get("HOME", ""), args, text)
    if (value := _LOADED.get(key, _LOADED)) is not _LOADED:
        return value  # type: ignore[no-any-return]
    value = load(path, (reader or parse)(path, text), *args)
    if len(text) <= LOADED_MAX_TEXT:
        _LOADED.put(key, value)
    return value


# -- reading ----------------------------------------------------------------


def check_link(path: Path, *, what: str, hint: str, also: tuple[Path, ...] = ()) -> None:
    """Refuse a file of a project (*what*: "an agent file", ...) reached through a symbolic link (the file's
    own, or a folder's on the way) that leads out of its project (the repository holding it:
    mmd.paths.project_root), out of the user's config folder and out of *also*, before a byte of it is read.

    A cloned repository ships its links: its ``mm.yaml``, ``.mcp.json`` or ``.claude/settings.json`` linked
    to ``~/.ssh/id_rsa`` or ``/etc/shadow`` was read by any prompt or ``mm tools list`` there, and a line,
    a key or a value of it could be quoted back in the config error. A link that stays inside the project, or leads to the user's own
    folders, is followed.

    Errors: ConfigError naming the link and where it leads (*hint*: what to do), quoting nothing of the
    target.
    """
    real = Path(os.path.realpath(path))
    root = paths.project_root(path.parent)
    config = paths.config_dir()
    if any(real.is_relative_to(os.path.realpath(folder)) for folder in (root, config, *also)):
        return
    others = "".join(f", {folder}" for folder in also)
    raise ConfigError(
        file=path,
        line=None,
        field="",
        problem=f"a symbolic link to {real}, outside the project ({root}) and your config folder ({config}"
        f"{others})",
        hint=f"mm reads {what} through a link only when it leads inside them, so that a cloned repository "
        f"cannot make it read another file of yours; {hint}",
    )


def _read(path: Path) -> str:
    try:
        with open_regular(path) as f:  # never waits on a FIFO put in a file's place
            size = os.fstat(f.fileno()).st_size
            raw = read_at_most(f, MAX_FILE_BYTES, size)  # never more than the limit, whatever the file's size
    except NotRegularFile:
        raise ConfigError(
            file=path,
            line=None,
            field="",
            problem="not a regular file",
            hint="an agent file or config.yaml must be a plain file (not a device, FIFO or folder)",
        ) from None
    except OSError as e:
        raise ConfigError(file=path, line=None, field="", problem=f"cannot read it: {e.strerror}") from None
    _check_size(str(path), raw, max(size, len(raw)))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            file=path, line=line, field="", problem="not UTF-8 text", hint="save the file as UTF-8"
        ) from None


def _check_size(name: str, raw: bytes, size: int) -> None:
    # raw: at most MAX_FILE_BYTES + 1 bytes of the file; size: the whole file's.
    if len(raw) <= MAX_FILE_BYTES:
        return
    line = raw[:MAX_FILE_BYTES].count(b"\n") + 1  # where the file passes the limit
    raise ConfigError(
        file=name,
        line=line,
        field="",
        problem=f"the file is {size:,} bytes; the limit is {MAX_FILE_BYTES:,} bytes (1 MiB) "
        "for a file written by hand",
        hint="keep long texts (a big system prompt) in skills or files the tools read, and the file short",
    )


def _syntax_error(name: str, text: str, e: yaml.YAMLError) -> ConfigError:
    if isinstance(e, yaml.reader.ReaderError):
        line = text[: e.position].count("\n") + 1
        char = chr(e.character) if isinstance(e.character, int) else e.character
        problem = f"a control character ({char!r}) YAML does not allow"
        return ConfigError(file=name, line=line, field="", problem=problem, hint="remove it")
    if not isinstance(e, yaml.MarkedYAMLError):
        return ConfigError(file=name, line=None, field="", problem=f"invalid YAML: {e}")
    mark = e.problem_mark or e.context_mark
    line = mark.line + 1 if mark else None
    problem = f"invalid YAML: {e.problem}" + (f" ({e.context})" if e.context else "")
    if "\t" in (e.problem or "") or "\\t" in (e.problem or ""):  # PyYAML quotes it as '\t'
        hint = "indent with spaces; YAML does not allow tabs"
    elif "another document" in (e.problem or ""):
        hint = "the file holds one document; remove the `---` line"
    elif e.context_mark and e.context_mark.line + 1 != line:
        hint = (
            f"it started on line {e.context_mark.line + 1}; check the brackets, quotes and indentation there"
        )
    else:
        hint = "check the indentation, the colons and the quotes on this line"
    return ConfigError(file=name, line=line, field="", problem=problem, hint=hint)


class _Builder:
    """Plain values from YAML nodes, recording the line of every key and list item."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[FieldPath, int] = {}
        self._yaml = LimitedLoader("")  # builds scalars by YAML's rules, within mm's (no 5,000-digit int)
        self._open: set[int] = set()  # nodes being built: an alias back to one is a cycle

    def build(self, node: yaml.Node, path: FieldPath) -> Any:
        if id(node) in self._open:
            raise self._error(node, path, "an alias refers to itself; write the value out")
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            if isinstance(node, yaml.SequenceNode):
                return self._sequence(node, path)
            return self._scalar(node, path)
        finally:
            self._open.discard(id(node))

    def _scalar(self, node: yaml.Node, path: FieldPath) -> Any:
        try:
            return self._yaml.construct_object(node, deep=True)
        except yaml.YAMLError as e:
            raise self._error(node, path, f"invalid value: {getattr(e, 'problem', e)}") from None

    def _sequence(self, node: yaml.SequenceNode, path: FieldPath) -> list[Any]:
        items = []
        for index, item in enumerate(node.value):
            self.lines[(*path, index)] = item.start_mark.line + 1
            items.append(self.build(item, (*path, index)))
        return items

    def _mapping(self, node: yaml.MappingNode, path: FieldPath) -> dict[Any, Any]:
        # Merged maps (`<<: *anchor`) first, so the map's own keys override them.
        merged = self._merged([value for key, value in node.value if key.tag == _MERGE_TAG], path)
        own: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self._key(key_node, path)
            here = (*path, key)
            if key in own:
                raise self._error(
                    key_node, here, f"duplicate key (first on line {self.lines[here]}); keep one"
                )
            self.lines[here] = key_node.start_mark.line + 1
            own[key] = self.build(value_node, here)
        return {**merged, **own}

    def _merged(self, nodes: list[yaml.Node], path: FieldPath) -> dict[Any, Any]:
        sources = [
            s for node in nodes for s in (node.value if isinstance(node, yaml.SequenceNode) else [node])
        ]
        merged: dict[Any, Any] = {}
        for source in reversed(sources):  # YAML: earlier sources win
            value = self.build(source, path)
            if not isinstance(value, dict):
                raise self._error(source, path, "`<<` can merge only maps")
            merged.update(value)
        return merged

    def _key(self, node: yaml.Node, path: FieldPath) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self._error(node, path, "a key must be a plain word, not a list or a map")
        return self._scalar(node, path)

    def _error(self, node: yaml.Node, path: FieldPath, problem: str) -> ConfigError:
        return ConfigError(file=self.file, line=node.start_mark.line + 1, field=dotted(path), problem=problem)


# -- checking values against types -------------------------------------------


def _unwrap(tp: Any) -> tuple[Any, list[msgspec.Meta]]:
    metas: list[msgspec.Meta] = []
    while get_origin(tp) is Annotated:
        tp, *extras = get_args(tp)
        metas += [m for m in extras if isinstance(m, msgspec.Meta)]
    return tp, metas


def _description(metas: list[msgspec.Meta]) -> str | None:
    return next((m.description for m in metas if m.description), None)


def _bounds(metas: list[msgspec.Meta]) -> str:
    words = {
        "ge": "at least",
        "gt": "more than",
        "le": "at most",
        "lt": "less than",
        "min_length": "length at least",
    }
    return " and ".join(
        f"{text} {getattr(m, attr)}"
        for m in metas
        for attr, text in words.items()
        if getattr(m, attr) is not None
    )


def _is_union(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType)


def _expected_inner(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return f"a map with the keys {', '.join(sorted(_keys(tp)))}"
    if _is_union(tp):
        texts = [expected(arg) for arg in get_args(tp) if arg is not type(None)]
        return " or ".join(dict.fromkeys(texts))
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(json.dumps(v) for v in get_args(tp))
    if get_origin(tp) is list:
        item = _unwrap(get_args(tp)[0])[0]
        return f"a list of {_PLURALS[item]}" if item in _PLURALS else "a list"
    if get_origin(tp) is dict:
        return "a map"
    return _TYPE_NAMES.get(tp, f"a {getattr(tp, '__name__', tp)}")


@functools.cache
def _keys(cls: type[msgspec.Struct]) -> Mapping[str, msgspec.structs.FieldInfo]:
    # Once per class: msgspec.structs.fields evaluates the class's annotations anew at every call, a
    # third of parsing a small config file, which every prompt does.
    internal = getattr(cls, "set_by_loader", frozenset())
    return types.MappingProxyType(
        {f.encode_name: f for f in msgspec.structs.fields(cls) if f.name not in internal}
    )


def _check(doc: Document, value: Any, tp: Any, path: FieldPath, want: str | None = None) -> None:
    # ``want`` carries an outer description (an Annotated on a union) down
    # to the member that is checked, so the error uses the author's words.
    inner, metas = _unwrap(tp)
    want = want or _description(metas)
    if isinstance(inner, type) and issubclass(inner, msgspec.Struct):
        _check_struct(doc, value, inner, path, want)
    elif _is_union(inner):
        _check_union(doc, value, tp, inner, path, want)
    elif get_origin(inner) is Literal:
        _check_literal(doc, value, inner, path, want)
    elif get_origin(inner) in (list, dict):
        _check_container(doc, value, inner, path, want)
    else:
        _check_leaf(doc, value, tp, path, want)


def _check_struct(
    doc: Document, value: Any, cls: type[msgspec.Struct], path: FieldPath, want: str | None
) -> None:
    if not isinstance(value, dict):
        hint = "write one `key: value` per line" if not path else None
        raise doc.error(path, expected=want or expected(cls), found=describe(value), hint=hint)
    keys = _keys(cls)
    hints = getattr(cls, "key_hints", {})  # a Struct's hints for keys of other tools' files, by key or parent
    for key in value:
        if key not in keys:
            hint = hints.get(str(key)) or (hints.get(str(path[-1])) if path else None)
            hint = hint or did_you_mean(str(key), keys) or "remove it, or check its spelling"
            raise doc.error((*path, key), problem="unknown key", expected=one_of(keys), hint=hint)
    for key, info in keys.items():
        if key in value:
            _check(doc, value[key], info.type, (*path, key))
        elif info.required:
            where = f"under {dotted(path)}" if path else "at the top of the file"
            raise doc.error(
                (*path, key), problem="missing", expected=expected(info.type), hint=f"add `{key}:` {where}"
            )


def _check_union(doc: Document, value: Any, tp: Any, inner: Any, path: FieldPath, want: str | None) -> None:
    members = [arg for arg in get_args(inner) if arg is not type(None)]
    if value is None and len(members) < len(get_args(inner)):
        return
    if len(members) == 1:
        _check(doc, value, members[0], path, want or expected(tp))
    else:
        _check_leaf(doc, value, tp, path, want)


def _check_literal(doc: Document, value: Any, tp: Any, path: FieldPath, want: str | None) -> None:
    choices = get_args(tp)
    # Compare types too: YAML's `1` must not pass for a Literal[True].
    if value not in choices or type(value) not in {type(c) for c in choices}:
        hint = did_you_mean(value, choices) if isinstance(value, str) else None
        raise doc.error(path, expected=want or expected(tp), found=describe(value), hint=hint)


def _check_container(doc: Document, value: Any, tp: Any, path: FieldPath, want: str | None) -> None:
    kind = get_origin(tp)
    if not isinstance(value, kind):
        single = kind is list and isinstance(value, str | int | float)
        hint = f"write [{value}] for a list of one" if single else None
        raise doc.error(path, expected=want or expected(tp), found=describe(value), hint=hint)
    if kind is list:
        (item_type,) = get_args(tp)
        for index, item in enumerate(value):
            _check(doc, item, item_type, (*path, index))
        return
    key_type, value_type = get_args(tp)
    for key, item in value.items():
        _check(doc, key, key_type, (*path, key), f"{expected(key_type)} as the key")
        _check(doc, item, value_type, (*path, key))


def _check_leaf(doc: Document, value: Any, tp: Any, path: FieldPath, want: str | None) -> None:
    try:
        msgspec.convert(value, tp)
    except msgspec.ValidationError:
        raise doc.error(path, expected=want or expected(tp), found=describe(value)) from None
