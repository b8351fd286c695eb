"""Skills: know-how in folders, listed in the system prompt, read on demand.

A skill is a folder holding ``SKILL.md`` (the Agent Skills format): YAML front
matter between ``---`` lines with ``name`` (lowercase letters, digits and
hyphens), ``description`` and optional ``keywords``, then the body. The
system prompt lists each skill in one line; the model calls ``read_skill``
to read the body, and ``read_file`` for the skill's other files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..untrusted import YamlLimitError, safe_load

# Largest front matter read: it holds a name, a description and keywords (a few hundred bytes).
MAX_FRONT_MATTER = 64 * 1024
# A skill's name: lowercase letters and digits, hyphens between them.
_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
# The line that closes the front matter.
_CLOSE = re.compile(r"^---[ \t]*$", re.MULTILINE)
# Folders of a skills directory that are not attempted skills.
_IGNORED = ("__pycache__", "node_modules")


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    keywords: tuple[str, ...]
    folder: Path  # absolute
    body: str

    def other_files(self, cap: int = 50) -> list[str]:
        """The skill's other files, relative to its folder, hidden ones left out."""
        out = []
        for top, dirs, files in os.walk(self.folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                rel = Path(top, name).relative_to(self.folder).as_posix()
                if not name.startswith(".") and rel != "SKILL.md":
                    out.append(rel)
            if len(out) >= cap:
                break
        return out[:cap]


@dataclass
class Catalogue:
    """The skills of one agent, by name, in priority order."""

    skills: dict[str, Skill] = field(default_factory=dict)

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
        for s in self.skills.values():
            keywords = f" [{', '.join(s.keywords)}]" if s.keywords else ""
            lines.append(f"- {s.name} — {s.description}{keywords}")
        return "\n".join(lines)


class SkillError(Exception):
    """A SKILL.md that cannot be loaded; the message says what is wrong."""


def load_skills(dirs: Iterable[Path]) -> tuple[Catalogue, list[str]]:
    """Load every skill under *dirs*, given in priority order.

    Each subfolder holding ``SKILL.md`` is a skill; a directory holding
    ``SKILL.md`` itself is one skill too. The first skill of a name wins.
    A directory that does not exist is skipped silently (the defaults often
    do not).

    Errors: none raised. Each problem becomes a warning naming the file and
    what is wrong: a malformed SKILL.md (skipped), a duplicate name (ignored),
    a folder with no SKILL.md (skipped; folders starting with "." or "_" are
    skipped silently, being no attempted skill).
    """
    catalogue, warnings = Catalogue(), []
    for d in dirs:
        for folder in _skill_folders(Path(d).expanduser(), warnings):
            try:
                skill = parse_skill(folder)
            except SkillError as e:
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
    return catalogue, warnings


def _skill_folders(d: Path, warnings: list[str]) -> list[Path]:
    if (d / "SKILL.md").is_file():
        return [d.absolute()]
    if not d.is_dir():
        return []
    out = []
    for sub in sorted(d.iterdir()):
        if not sub.is_dir() or sub.name.startswith((".", "_")) or sub.name in _IGNORED:
            continue
        if (sub / "SKILL.md").is_file():
            out.append(sub.absolute())
        elif (sub / "skill.md").is_file():
            warnings.append(f"{sub}: has skill.md; the file must be named SKILL.md. Skipped.")
        else:
            warnings.append(f"{sub}: no SKILL.md in this folder, so it is not a skill. Skipped.")
    return out


def parse_skill(folder: Path) -> Skill:
    """Read ``folder/SKILL.md``.

    Errors: SkillError for no front matter, bad YAML, a missing or malformed
    name or description; OSError and UnicodeDecodeError become SkillError too.
    """
    try:
        text = (folder / "SKILL.md").read_text(encoding="utf-8").removeprefix("\ufeff")
    except (OSError, UnicodeDecodeError) as e:
        raise SkillError(f"cannot be read ({e})") from None
    if not re.match(r"---[ \t]*\r?\n", text):
        raise SkillError("no front matter: the file must start with a --- line, then name: and description:")
    start = text.index("\n") + 1
    close = _CLOSE.search(text, start)
    if close is None:
        raise SkillError("the front matter has no closing --- line")
    meta = _front_matter(text[start : close.start()])
    body = text[close.end() :].lstrip("\r\n")
    return Skill(
        name=_name(meta),
        description=_text_field(meta, "description"),
        keywords=_keywords(meta),
        folder=folder,
        body=body,
    )


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


def _name(meta: dict) -> str:
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
    return tuple(str(k) for k in keywords if str(k).strip())
