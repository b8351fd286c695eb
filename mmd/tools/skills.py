"""Skills: know-how in folders, listed in the system prompt, read on demand.

A skill is a folder holding ``SKILL.md`` (the Agent Skills format): YAML front
matter between ``---`` lines with ``name`` (lowercase letters, digits and
hyphens; the folder's name when left out, as in Claude Code), ``description``,
optional ``keywords`` and ``allowed-tools``, then the body. The system prompt
lists each skill in one line; the model calls ``read_skill`` to read the body,
and ``read_file`` for the skill's other files.

Which folders are searched, in which order, is mmd/tools/skilldirs.py's;
what ``allowed-tools`` does is mmd/tools/allowed.py's. Nothing in a skill
folder is ever run by loading it: SKILL.md is read as text and its front
matter parsed with mm's limited YAML loader (no tags, no aliases past a limit).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

import msgspec
import yaml

from ..kept import Kept
from ..untrusted import YamlLimitError, first_names, open_regular, read_at_most, safe_load, walk

# Largest front matter read: it holds a name, a description and keywords (a few hundred bytes; a description
# is at most 1,024 characters in Claude's format). YAML is read in Python, ~4 ms a kilobyte here.
MAX_FRONT_MATTER = 16 * 1024
# What one load reads of all its skills at most: SKILL.md bytes (each skill's body is kept for read_skill)
# and front matter (YAML). A cloned repository's 500 skills of 64 KB front matter took 115 s of the daemon
# to load, at every prompt, and 500 bodies of 256 KB would be 128 MB kept; past either, skills are skipped.
MAX_SKILLS_BYTES = 4 * 1024 * 1024
MAX_FRONT_MATTER_TOTAL = 256 * 1024
# Largest SKILL.md read: a body the model reads whole (Claude's guidance: under 500 lines); a file past
# this is skipped, so a huge or endless file in a cloned repository costs one bounded read.
MAX_SKILL_BYTES = 256 * 1024
# A skill's name: lowercase letters and digits, hyphens between them.
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# The line that closes the front matter.
_CLOSE = re.compile(r"^---[ \t]*$", re.MULTILINE)
# Entries of one skills folder read: a cloned repository's 100,000 folders must not become 100,000 warnings
# (and reads) on every prompt; real skill folders hold tens. The listing stops there (untrusted.first_names):
# sorting a million entries to take 500 added 11 s and 300 MB to every prompt in that project.
MAX_FOLDERS = 500
# Folders of a skill looked through for its other files (read_skill names them): a chain of empty folders
# in a cloned repository's skill must not be walked to its end at every read.
OTHER_FILES_FOLDERS = 1000
# Folders without SKILL.md warned about one by one in one skills folder; the rest in one line.
MAX_SKIPPED_WARNINGS = 20
# The skills read last, by folder, source and whole SKILL.md text: every prompt reads every skill again, and
# its front matter's YAML (~4 ms a kilobyte) was most of a prompt's CPU for a user of twenty skills. An edit
# is always seen (the text is the key); a file that fails is not kept. Bounded by what the entries weigh: the
# text's characters (a Skill keeps its body: about twice that in memory), the folder's and the source's, and
# KEPT_OVERHEAD for the objects; and by their number; the skills used last kept first. Weighed by their texts
# alone, 20,000 small skills in long folders were 660 KiB of the budget and held ~26 MiB.
KEPT_TEXT = 1024 * 1024  # characters all the entries weigh together
KEPT_OVERHEAD = 512  # characters an entry weighs besides its strings: its key, the Skill, its Path
KEPT_ENTRIES = 1024  # entries kept at most, whatever they weigh


def _weight(key: tuple[str, str, str]) -> int:
    """What an entry of _kept counts for against KEPT_TEXT: its strings' characters and the overhead."""
    folder, source, text = key
    return len(folder) + len(source) + len(text) + KEPT_OVERHEAD


_kept: Kept[tuple[str, str, str], Skill] = Kept(KEPT_ENTRIES, KEPT_TEXT, _weight)  # mmd/kept.py
# Folders of a skills directory that are not attempted skills.
_IGNORED = ("__pycache__", "node_modules")


class Skill(msgspec.Struct, frozen=True):
    name: str
    description: str
    keywords: tuple[str, ...]
    folder: Path  # absolute
    body: str
    # allowed-tools as written (Claude's names, like "Bash(git:*)"); None: the key is absent.
    allowed_tools: tuple[str, ...] | None = None
    source: str = ""  # where it was found, as `mm skills list` shows it: "project .claude", "user mm", ...

    def other_files(self, cap: int = 50) -> list[str]:
        """The skill's other files, relative to its folder, hidden ones left out; those of its first
        OTHER_FILES_FOLDERS folders (a walk without recursion: a skill's folder is a project's input)."""
        out = []
        for seen, (top, dirs, files) in enumerate(walk(self.folder), 1):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                rel = Path(top, name).relative_to(self.folder).as_posix()
                if not name.startswith(".") and rel != "SKILL.md":
                    out.append(rel)
            if len(out) >= cap or seen >= OTHER_FILES_FOLDERS:
                break
        return out[:cap]


class Catalogue(msgspec.Struct):
    """The skills of one agent, by name, in priority order."""

    skills: dict[str, Skill] = msgspec.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.skills)

    def get(self, name: str) -> Skill | None:
        return self.skills.get(name)

    def names(self) -> list[str]:
        return list(self.skills)

    def folders(self) -> tuple[Path, ...]:
        """Each skill's folder: the file tools read them without a path consent (ToolContext.skill_folders)."""
        return tuple(skill.folder for skill in self.skills.values())

    def render(self) -> str:
        """The catalogue as the system prompt shows it; "" when there is no skill."""
        if not self.skills:
            return ""
        lines = ["Skills: know-how for some tasks. To read one, call read_skill with its name."]
        lines += [self.line(s) for s in self.skills.values()]
        return "\n".join(lines)

    @staticmethod
    def line(s: Skill) -> str:
        """The skill's line in the system prompt."""
        keywords = f" [{', '.join(s.keywords)}]" if s.keywords else ""
        return f"- {s.name} — {s.description}{keywords}"


class SkillError(Exception):
    """A SKILL.md that cannot be loaded; the message says what is wrong."""


class _Budget:
    """What a load may still read (MAX_SKILLS_BYTES, MAX_FRONT_MATTER_TOTAL)."""

    def __init__(self) -> None:
        self.bytes = MAX_SKILLS_BYTES
        self.front = MAX_FRONT_MATTER_TOTAL
        self.skipped = 0  # skills not read once it was spent

    def take(self, size: int, front: int) -> bool:
        """Whether a SKILL.md of *size* bytes and *front* characters of front matter still fits (then taken)."""
        if size > self.bytes or front > self.front:
            self.bytes = self.front = 0  # spent: no later skill is read either (the order is the priority)
            return False
        self.bytes -= size
        self.front -= front
        return True


class SkillDir(msgspec.Struct, frozen=True):
    """One folder searched for skills: where it is, what `mm skills list` calls it, what it may reach."""

    path: Path
    source: str = ""
    # A folder every skill (its folder and SKILL.md, symlinks resolved) must stay inside; None: no limit.
    # A project's skills are confined to the project: a cloned repository's symlink to ~/.ssh is no skill.
    confine: Path | None = None
    # Not there when the list of folders was made (mmd/tools/skilldirs.py looked, one stat): not looked in.
    missing: bool = False


def load_skills(dirs: Iterable[Path | SkillDir]) -> tuple[Catalogue, list[str]]:
    """Load every skill under *dirs*, given in priority order.

    Each subfolder holding ``SKILL.md`` is a skill; a directory holding
    ``SKILL.md`` itself is one skill too. The first skill of a name wins.
    A directory that does not exist is skipped silently (the defaults often
    do not; mmd/tools/skilldirs.py warns about a configured one).

    Errors: none raised. Each problem becomes a warning naming the file and
    what is wrong: a malformed SKILL.md (skipped), a duplicate name (ignored),
    a folder with no SKILL.md (skipped; folders starting with "." or "_" are
    skipped silently, being no attempted skill), a skill whose folder or
    SKILL.md resolves outside its SkillDir's ``confine`` (skipped).
    """
    catalogue, warnings, budget, failed = Catalogue(), [], _Budget(), 0
    for d in dirs:
        where = d if isinstance(d, SkillDir) else SkillDir(Path(d))
        if where.missing:  # most of the folders a prompt names: their stat failed once already
            continue
        for folder in _skill_folders(where.path.expanduser(), warnings):
            try:
                _check_confined(folder, where.confine)
                skill = parse_skill(folder, source=where.source, budget=budget)
                if skill is None:
                    continue
            except SkillError as e:
                failed += 1
                if failed <= MAX_SKIPPED_WARNINGS:  # one a file, as many as a cloned repository holds: cut
                    warnings.append(f"{folder / 'SKILL.md'}: {e}; skill skipped.")
                continue
            first = catalogue.skills.get(skill.name)
            if first is not None:
                warnings.append(
                    f"{folder / 'SKILL.md'}: a skill named {skill.name} was already loaded from {first.folder}; "
                    "this one is ignored."
                )
                continue
            catalogue.skills[skill.name] = skill
    if failed > MAX_SKIPPED_WARNINGS:
        warnings.append(f"{failed - MAX_SKIPPED_WARNINGS} more SKILL.md files could not be loaded. Skipped.")
    if budget.skipped:
        warnings.append(
            f"{budget.skipped} skills not loaded: the ones before them hold the most read for one prompt "
            f"({MAX_SKILLS_BYTES // 1024 // 1024} MiB of SKILL.md, {MAX_FRONT_MATTER_TOTAL // 1024} KiB of front "
            "matter); keep skills short, or fewer in the project"
        )
    return catalogue, warnings


def _skill_folders(d: Path, warnings: list[str]) -> list[Path]:
    if not d.is_dir():  # most of the folders looked in: one stat
        return []
    if (d / "SKILL.md").is_file():
        return [d.absolute()]
    out = []
    try:
        names = first_names(d, MAX_FOLDERS)  # never the whole folder: a cloned repository's may hold millions
    except OSError:
        return []
    if len(names) > MAX_FOLDERS:
        names = names[:MAX_FOLDERS]
        warnings.append(
            f"{d}: more than {MAX_FOLDERS} entries; only the first {MAX_FOLDERS} the file system lists are "
            f"read as skills (from {min(names)} to {max(names)} by name; the same ones while the folder is "
            "unchanged): a skills folder holds one folder per skill"
        )
    skipped = []
    for sub in (d / name for name in sorted(names)):
        if not sub.is_dir() or sub.name.startswith((".", "_")) or sub.name in _IGNORED:
            continue
        if (sub / "SKILL.md").is_file():
            out.append(sub.absolute())
        elif (sub / "skill.md").is_file():
            skipped.append(f"{sub}: has skill.md; the file must be named SKILL.md. Skipped.")
        else:
            skipped.append(f"{sub}: no SKILL.md in this folder, so it is not a skill. Skipped.")
    warnings += skipped[:MAX_SKIPPED_WARNINGS]
    if len(skipped) > MAX_SKIPPED_WARNINGS:
        warnings.append(f"{d}: {len(skipped) - MAX_SKIPPED_WARNINGS} more folders without SKILL.md. Skipped.")
    return out


def _check_confined(folder: Path, confine: Path | None) -> None:
    if confine is None:
        return
    root = os.path.realpath(confine)
    for path in (folder, folder / "SKILL.md"):
        real = os.path.realpath(path)
        if os.path.commonpath([real, root]) != root:
            raise SkillError(
                f"resolves to {real}, outside {root}: a project's skill must stay inside the project "
                "(copy the skill in, or put it in ~/.config/mm/skills)"
            )


def parse_skill(folder: Path, source: str = "", budget: _Budget | None = None) -> Skill | None:
    """Read ``folder/SKILL.md``; None (counted in *budget*) when it no longer fits in the load's *budget*.

    Errors: SkillError for a file past MAX_SKILL_BYTES, no front matter, bad
    YAML, a missing or malformed name or description, a malformed
    allowed-tools; OSError and UnicodeDecodeError become SkillError too.
    """
    text = _read(folder / "SKILL.md")
    if not re.match(r"---[ \t]*\r?\n", text):
        raise SkillError("no front matter: the file must start with a --- line, then name: and description:")
    start = text.index("\n") + 1
    close = _CLOSE.search(text, start)
    if close is None:
        raise SkillError("the front matter has no closing --- line")
    front = text[start : close.start()]
    if len(front) <= MAX_FRONT_MATTER and budget is not None and not budget.take(len(text), len(front)):
        budget.skipped += 1  # one too big is refused by _front_matter, unread and uncounted
        return None
    key = (str(folder), source, text)
    if (skill := _kept.get(key)) is not None:
        return skill  # type: ignore[no-any-return]
    meta = _front_matter(front)
    body = text[close.end() :].lstrip("\r\n")
    skill = Skill(
        name=_name(meta, folder),
        description=_text_field(meta, "description"),
        keywords=_keywords(meta),
        folder=folder,
        body=body,
        allowed_tools=_allowed_tools(meta),
        source=source,
    )
    _kept.put(key, skill)
    return skill


def _read(path: Path) -> str:
    try:
        with open_regular(path) as f:  # a FIFO put there since the listing is refused, not waited on
            raw = read_at_most(f, MAX_SKILL_BYTES)
        if len(raw) > MAX_SKILL_BYTES:
            raise SkillError(
                f"is over {MAX_SKILL_BYTES:,} bytes, the most read: keep the instructions short "
                "and put long references in other files of the skill, read when needed"
            )
        return raw.decode("utf-8").removeprefix("\ufeff")
    except (OSError, UnicodeDecodeError) as e:
        raise SkillError(f"cannot be read ({e})") from None


def _front_matter(text: str) -> dict:
    if len(text) > MAX_FRONT_MATTER:
        raise SkillError(
            f"the front matter is {len(text):,} characters; the limit is {MAX_FRONT_MATTER:,}: "
            "keep name, description and keywords there, and the rest in the body"
        )
    try:
        meta = safe_load(text)  # within mm's nesting and alias limits (mmd/untrusted.py)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""  # +1 for 1-based, +1 for the --- line
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        hint = f"; {e.hint}" if isinstance(e, YamlLimitError) else ""
        raise SkillError(f"bad YAML in the front matter{where}: {problem}{hint}") from None
    if not isinstance(meta, dict):
        raise SkillError("the front matter must be a mapping with name: and description:")
    return meta


def _text_field(meta: dict, key: str) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SkillError(f"{key}: is missing or empty")
    return " ".join(value.split())  # one line in the catalogue


def _name(meta: dict, folder: Path) -> str:
    if meta.get("name") is None:  # Claude Code's default: the folder's name
        if _NAME.fullmatch(folder.name):
            return folder.name
        raise SkillError(
            f"name: is missing and the folder's name {folder.name!r} is no skill name "
            "(lowercase letters, digits and hyphens): add name: to the front matter"
        )
    name = _text_field(meta, "name")
    if not _NAME.fullmatch(name):
        raise SkillError(f"name {name!r} must be lowercase letters, digits and hyphens, like release-notes")
    return name


def _keywords(meta: dict) -> tuple[str, ...]:
    keywords = meta.get("keywords") or []
    if isinstance(keywords, str):
        keywords = [k.strip() for k in keywords.split(",")]
    if not isinstance(keywords, list):
        raise SkillError("keywords: must be a list of words")
    return tuple(" ".join(str(k).split()) for k in keywords if str(k).strip())  # one line each


# What separates the tools of an allowed-tools string at the top level: commas and blanks.
_SEPARATORS = ", \t\n"


def _allowed_tools(meta: dict) -> tuple[str, ...] | None:
    """allowed-tools as written: a list, or one string separated by commas or blanks ("Read, Bash(git:*)").

    Blanks inside parentheses belong to the entry: "Bash(git log:*) Read" is two entries.
    """
    value = meta.get("allowed-tools")
    if value is None:
        return None
    if isinstance(value, str):
        return tuple(_split_entries(value))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(e for v in value for e in _split_entries(v))
    raise SkillError(
        "allowed-tools: must be a list of tool names or one string of them separated by commas, "
        f"like Read, Grep, Bash(git:*); found {type(value).__name__}"
    )


def _split_entries(text: str) -> list[str]:
    entries, current, depth = [], "", 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth <= 0 and ch in _SEPARATORS:
            depth = 0
            if current:
                entries.append(current)
            current = ""
        else:
            current += ch
    return [*entries, current] if current else entries
