"""The commands a skill names, read from its body, so that a bash call made under the skill can be checked.

A skill is know-how in prose, but most skills that say how to act name their commands in code: a
template with placeholders (```./actions/scale SERVICE REPLICAS```) and often an example that fills
them (```./actions/scale search-api 3```). Measured on both eval fixtures' skill mode, what small models
got wrong *after* the right skill was in their context was mostly one of three things, all visible
against those templates:

- an **example value** run as if the user had asked for it (``./actions/pkgtest parser`` for "the tests
  of the greet package": 4 of the 0.5B's 30 contrib/eval runs);
- a **placeholder left unfilled** (``./actions/release VERSION CHANNEL``);
- a **command guessed** instead of the skill's (``status billing``, ``pg_dump orders``, ``npm test``),
  which fails and is then repeated.

:func:`commands` reads the templates and examples out of a skill's body; :meth:`Commands.refusal` says
why a command is not run (the first two), and :meth:`Commands.hint` what to add to a failed command's
result (the third). What counts as a placeholder is deliberately narrow, so that a literal word in
capitals is not taken for one: ``<name>``, ``{name}`` and ``{{name}}`` always; a word in capitals
(``VERSION``) only when an example of the same command puts another value in its place, or the prose
outside code names it ("REPLICAS is a whole number"), and never a git ref like ``HEAD``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection

import msgspec

from ..config.declared import PLACEHOLDER, DeclaredToolSpec, ParamSpec

_FENCE = re.compile(r"^(```|~~~)[^\n]*\n(.*?)^\1", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`\n]+)`")
_BRACKETED = re.compile(r"^(<[^<>\s]+>|\{\{?[^{}\s]+\}?\})$")
_CAPITALS = re.compile(r"^[A-Z][A-Z0-9_]{1,39}$")
_NOT_PLACEHOLDERS = {"HEAD", "FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "README", "TODO", "PATH", "HOME"}
_PROMPT = re.compile(r"^\s*[$#>]\s+")
# Words that run the next word as the command, and the shell's joints between commands.
_WRAPPERS = {"sudo", "env", "exec", "time", "nohup", "command"}
_JOINTS = {";", "&&", "||", "|", "&", "(", ")"}
# Programs that run the script named next: a template's tool is named after the script.
_RUNNERS = {"python", "python3", "node", "bash", "sh", "ruby", "perl", "php", "deno", "bun", "npx", "uvx"}
# The most templates read from one skill, and the longest line taken for a command.
MAX_TEMPLATES = 40
MAX_CODE_LINES = 400
_MAX_LINE = 300


class Template(msgspec.Struct, frozen=True):
    words: tuple[str, ...]  # the command as the skill writes it, program first
    slots: dict[int, str]  # position → placeholder
    # Position → values its examples show.
    examples: dict[int, frozenset[str]] = msgspec.field(default_factory=dict)
    said: str = ""  # the prose the skill writes the command with ("Take a backup of one database now")

    @property
    def text(self) -> str:
        return " ".join(self.words)

    @property
    def program(self) -> str:
        return self.words[0]


class Commands(msgspec.Struct, frozen=True):
    skill: str
    templates: tuple[Template, ...]

    def refusal(self, command: str, heard: str) -> str | None:
        """Why *command* is not run under this skill, or None: a placeholder left as it is, or one of the
        skill's example values that *heard* (the user's words and tool results, lower-cased) never holds."""
        words = _split(command)
        for template in self.templates:
            for start in _calls_of(words, template.program):
                for pos, placeholder in template.slots.items():
                    if start + pos >= len(words):
                        continue
                    word = words[start + pos]
                    if word == placeholder:
                        return (
                            f"{placeholder} is a placeholder in the skill {self.skill}'s command "
                            f"`{template.text}`; put the value from the user's request in its place."
                        )
                    if word in template.examples.get(pos, ()) and word.lower() not in heard:
                        return (
                            f'"{word}" is the example value for {placeholder} in the skill '
                            f"{self.skill}, not a value the user gave. Run `{template.text}` with the "
                            f"user's own value for {placeholder}."
                        )
        return None

    def example_values(self) -> frozenset[str]:
        """Every value the skill's examples put in a placeholder's place."""
        return frozenset(v for t in self.templates for values in t.examples.values() for v in values)

    def hint(self, command: str) -> str | None:
        """What to tell the model after *command* failed: the skill's own commands, when it used none."""
        if not self.templates:
            return None
        words = _split(command)
        if any(_calls_of(words, t.program) for t in self.templates):
            return None  # it ran the skill's command; its own output says what went wrong
        named = ", ".join(f"`{t.text}`" for t in self.templates[:8])
        guessed = {w.rsplit("/", 1)[-1] for w in _programs(words)}
        same = [t for t in self.templates if t.program.rsplit("/", 1)[-1] in guessed]
        if same:
            return (
                f"The skill {self.skill} runs this as `{same[0].text}`, from the working directory, "
                "with the values from the user's request in place of the placeholders."
            )
        return f"This is not a command the skill {self.skill} names. Its commands, run from the working directory: {named}."


def tool_specs(found: Commands, taken: Collection[str]) -> list[DeclaredToolSpec]:
    """The skill's templates as declared tools: the program and its literal words as the skill writes
    them, each placeholder a required string parameter filling one argv entry, no shell (mmd/tools/
    declared.py runs them: a value never starts an option with "-", never holds a NUL). Named after the
    program (``./actions/backup`` → ``backup``), else after the skill and the program; a template whose
    name is *taken* twice over, or whose literal words look like placeholders of declared tools, is left to
    bash."""
    specs: list[DeclaredToolSpec] = []
    names = set(taken)
    for t in found.templates:
        base = _tool_name(_named_by(t))
        name = next((n for n in (base, _tool_name(f"{found.skill}_{base}")) if n not in names), None)
        if name is None or any(PLACEHOLDER.search(w) for i, w in enumerate(t.words) if i not in t.slots):
            continue
        params: dict[str, ParamSpec] = {}
        command = [t.program]
        for i, word in enumerate(t.words[1:], 1):
            if i not in t.slots:
                command.append(word)
                continue
            param = _param_name(t.slots[i], len(params))
            command.append("{{" + param + "}}")
            params[param] = ParamSpec(required=True, description=f"{t.slots[i]} in `{t.text}`")
        what = t.said or f"Run {t.text}"
        specs.append(
            DeclaredToolSpec(
                name=name,
                description=f"{what} (the skill {found.skill}'s command `{t.text}`).",
                command=command,
                parameters=params,
                effects="write",
            )
        )
        names.add(name)
    return specs


def _named_by(t: Template) -> str:
    """What names a template's tool: its program, or the script an interpreter runs (``python
    scripts/fill_form.py IN OUT`` → ``fill_form``)."""
    program = t.program.rsplit("/", 1)[-1]
    if program in _RUNNERS and len(t.words) > 1 and 1 not in t.slots and not t.words[1].startswith("-"):
        return t.words[1].rsplit("/", 1)[-1].split(".", 1)[0] or program
    return program


def _tool_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_-")[:64]
    return name if name[:1].isalpha() else f"run_{name}"[:64]


def _param_name(placeholder: str, index: int) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", placeholder.strip("<>{} ").lower()).strip("_")
    return name if name[:1].isalpha() or name[:1] == "_" else f"value_{index + 1}"


def commands(skill: str, body: str) -> Commands:
    """The command templates of a skill's *body*, each with the values its examples give its placeholders."""
    prose = _SPAN.sub(" ", _FENCE.sub(" ", body))
    named = set(re.findall(r"\b[A-Z][A-Z0-9_]{1,39}\b", prose))
    found = [(words, said) for line, said in _code_lines(body) if (words := _split(line))]
    parsed = [words for words, _ in found]
    templates: list[Template] = []
    for words, said in found:
        slots = {i: w for i, w in enumerate(words) if i > 0 and _placeholder(w, named, i, words, parsed)}
        if not slots or any(t.words == tuple(words) for t in templates):
            continue
        examples: dict[int, set[str]] = {}
        for other in parsed:
            if _fills(other, words, slots):
                for i in slots:
                    if not _placeholder_shape(other[i]):
                        examples.setdefault(i, set()).add(other[i])
        frozen = {i: frozenset(v) for i, v in examples.items()}
        templates.append(Template(tuple(words), slots, frozen, said))
        if len(templates) >= MAX_TEMPLATES:
            break
    return Commands(skill, tuple(templates))


def _fills(other: list[str], words: list[str], slots: dict[int, str]) -> bool:
    """Whether *other* is an example of the template *words*: the same words but in its *slots*."""
    if len(other) != len(words) or other == words:
        return False
    return all(other[i] == w for i, w in enumerate(words) if i not in slots)


def _placeholder(word: str, named: set[str], pos: int, words: list[str], parsed: list[list[str]]) -> bool:
    if _BRACKETED.match(word):
        return True
    if not _CAPITALS.match(word) or word in _NOT_PLACEHOLDERS or word.endswith("HEAD"):
        return False
    if word in named:
        return True
    return any(  # an example of the same command with another value here
        len(o) == len(words) and o[0] == words[0] and o[pos] != word and not _placeholder_shape(o[pos])
        for o in parsed
    )


def _placeholder_shape(word: str) -> bool:
    return bool(_BRACKETED.match(word) or _CAPITALS.match(word))


def _code_lines(body: str) -> list[tuple[str, str]]:
    """Each line of code in *body* (inline spans, and the lines of fenced blocks with a shell prompt cut
    off), with the prose it stands in: its own line's words, else the last line of prose before it. At
    most MAX_CODE_LINES: templates and examples are compared with each other."""
    out: list[tuple[str, str]] = []
    fence, said = "", ""
    for raw in body.splitlines():
        line = raw.strip()
        if fence:
            if line.startswith(fence):
                fence = ""
            elif line:
                out.append((_PROMPT.sub("", line).strip(), said))
        elif line.startswith(("```", "~~~")):
            fence = line[:3]
        else:
            words = " ".join(_SPAN.sub(" ", line).split()).strip(" -*:.,;").strip()
            out += [(span.strip(), words or said) for span in _SPAN.findall(line)]
            said = words or said
        if len(out) >= MAX_CODE_LINES:
            break
    return [
        (code, said[:_MAX_LINE]) for code, said in out[:MAX_CODE_LINES] if code and len(code) <= _MAX_LINE
    ]


def _split(command: str) -> list[str]:
    """The words of a shell command, joints (;, &&, |) as words of their own; plain splitting if unquotable."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        return list(lexer)
    except ValueError:
        return command.split()


def _programs(words: list[str]) -> list[str]:
    """The word that names the program of each simple command in *words*."""
    out, first = [], True
    for word in words:
        if word in _JOINTS:
            first = True
        elif first and not ("=" in word and word.split("=", 1)[0].isidentifier()) and word not in _WRAPPERS:
            out.append(word)
            first = False
    return out


def _calls_of(words: list[str], program: str) -> list[int]:
    """Where *words* run *program*: the same path (``./a/run`` and ``a/run`` are; ``./run`` and ``run``,
    which bash looks up on PATH, are not)."""
    bare = program[2:] if program.startswith("./") and "/" in program[2:] else None
    return [i for i, w in enumerate(words) if w in (program, bare)]
