"""Skills on real folders: loading, warnings, the catalogue text, and read_skill."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from mmd.contract import validate
from mmd.tools import skills
from mmd.tools.base import ToolContext, ToolError
from mmd.tools.builtin import BUILTIN_TOOLS, make_builtins
from mmd.tools.builtin.skill import ReadSkill
from mmd.tools.skills import Catalogue, load_skills

from ...folders import chain

RELEASE_MD = """\
---
name: release
description: Publish a release of the product to one channel.
keywords: [deploy, ship]
---

# Release

Run `scripts/release.sh VERSION --channel=CHANNEL`.
"""


def skill(root: Path, folder: str, text: str, **extra: str) -> Path:
    path = root / folder
    path.mkdir(parents=True)
    (path / "SKILL.md").write_text(text)
    for rel, content in extra.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(content)
    return path


def front(name: str, description: str = "Does a thing.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\nBody of {name}.\n"


def test_load_skills_and_render_the_catalogue(tmp_path: Path) -> None:
    skill(tmp_path / "agent", "release", RELEASE_MD)
    skill(tmp_path / "agent", "status", front("status", "Report the status\n  of one service."))
    catalogue, warnings = load_skills([tmp_path / "agent"])
    assert warnings == []
    assert catalogue.names() == ["release", "status"]
    assert catalogue.render() == (
        "Skills: know-how for some tasks. To read one, call read_skill with its name.\n"
        "- release — Publish a release of the product to one channel. [deploy, ship]\n"
        "- status — Report the status of one service."
    )
    release = catalogue.get("release")
    assert release is not None
    assert release.body == "# Release\n\nRun `scripts/release.sh VERSION --channel=CHANNEL`.\n"
    assert release.folder == (tmp_path / "agent" / "release").absolute()


def test_empty_catalogue_renders_nothing(tmp_path: Path) -> None:
    catalogue, warnings = load_skills([tmp_path / "missing", tmp_path])
    assert (catalogue.render(), len(catalogue), warnings) == ("", 0, [])


def test_first_dir_wins_and_the_duplicate_is_warned(tmp_path: Path) -> None:
    first = skill(tmp_path / "agent", "release", front("release", "Agent's release."))
    later = skill(tmp_path / "project", "release-copy", front("release", "Project's release."))
    skill(tmp_path / "project", "notes", front("notes"))
    catalogue, warnings = load_skills([tmp_path / "agent", tmp_path / "project"])
    assert catalogue.names() == ["release", "notes"]
    assert catalogue.skills["release"].description == "Agent's release."
    assert warnings == [
        f"{later / 'SKILL.md'}: a skill named release was already loaded from {first}; this one is ignored."
    ]


def test_a_dir_holding_skill_md_is_one_skill(tmp_path: Path) -> None:
    folder = skill(tmp_path, "release", RELEASE_MD)
    catalogue, _ = load_skills([folder])
    assert catalogue.names() == ["release"]


MALFORMED = [
    (
        "# Release\nNo front matter.\n",
        "no front matter: the file must start with a --- line, then name: and description:",
    ),
    ("---\nname: x\ndescription: y\n", "the front matter has no closing --- line"),
    (
        "---\nname: [x\ndescription: y\n---\n",
        "bad YAML in the front matter at line 3: expected ',' or ']', but got ':'",
    ),
    ("---\njust text\n---\n", "the front matter must be a mapping with name: and description:"),
    ("---\nname: broken\n---\n", "description: is missing or empty"),
    ("---\nname: ''\ndescription: y\n---\n", "name: is missing or empty"),
    (
        "---\nname: Release_Notes\ndescription: y\n---\n",
        "name 'Release_Notes' must be lowercase letters, digits and hyphens, like release-notes",
    ),
    ("---\nname: x\ndescription: y\nkeywords: {a: 1}\n---\n", "keywords: must be a list of words"),
    (
        "---\nname: x\ndescription: y\nallowed-tools: {Bash: yes}\n---\n",
        "allowed-tools: must be a list of tool names or one string of them separated by commas, "
        "like Read, Grep, Bash(git:*); found dict",
    ),
]


@pytest.mark.parametrize(("text", "problem"), MALFORMED)
def test_a_malformed_skill_is_warned_and_skipped(tmp_path: Path, text: str, problem: str) -> None:
    broken = skill(tmp_path, "broken", text)
    skill(tmp_path, "good", front("good"))
    catalogue, warnings = load_skills([tmp_path])
    assert catalogue.names() == ["good"]
    assert warnings == [f"{broken / 'SKILL.md'}: {problem}; skill skipped."]


def test_keywords_may_be_one_comma_separated_string(tmp_path: Path) -> None:
    skill(tmp_path, "x", "---\nname: x\ndescription: y\nkeywords: deploy, ship\n---\n")
    catalogue, _ = load_skills([tmp_path])
    assert catalogue.skills["x"].keywords == ("deploy", "ship")


def test_folders_without_skill_md(tmp_path: Path) -> None:
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "notes.md").write_text("todo")
    (tmp_path / "lower").mkdir()
    (tmp_path / "lower" / "skill.md").write_text(front("lower"))
    (tmp_path / ".cache").mkdir()  # hidden: not an attempted skill, no warning
    (tmp_path / "_archive").mkdir()
    (tmp_path / "README.md").write_text("A file beside the skills is fine.")
    skill(tmp_path, "good", front("good"))
    catalogue, warnings = load_skills([tmp_path])
    assert catalogue.names() == ["good"]
    assert warnings == [
        f"{tmp_path / 'draft'}: no SKILL.md in this folder, so it is not a skill. Skipped.",
        f"{tmp_path / 'lower'}: has skill.md; the file must be named SKILL.md. Skipped.",
    ]


def test_a_skills_folder_of_many_entries_is_listed_only_to_its_cap(tmp_path: Path, monkeypatch) -> None:
    """A cloned repository's skills folder of a million entries was listed whole and sorted at every prompt
    (11 s, 300 MB): the listing stops at MAX_FOLDERS, the file system's first, and the warning says so."""
    monkeypatch.setattr(skills, "MAX_FOLDERS", 5)
    for i in range(40):
        skill(tmp_path, f"s{i:02}", front(f"s{i:02}"))
    listed = []
    real = os.scandir

    def counted(path):
        listing = real(path)
        if Path(path) == tmp_path:
            listing = contextlib.closing(_Counting(listing, listed))  # type: ignore[assignment]
        return listing

    monkeypatch.setattr(os, "scandir", counted)
    catalogue, warnings = load_skills([tmp_path])
    monkeypatch.undo()
    with os.scandir(tmp_path) as listing:
        first = sorted([e.name for e in listing][:5])
    assert catalogue.names() == first  # the file system's first five, by name
    assert len(listed) <= 6  # one past the cap tells the folder holds more; no more is read
    assert warnings == [
        f"{tmp_path}: more than 5 entries; only the first 5 the file system lists are read as skills "
        f"(from {first[0]} to {first[-1]} by name; the same ones while the folder is unchanged): "
        "a skills folder holds one folder per skill"
    ]


class _Counting:
    """A scandir listing that notes each entry it gives."""

    def __init__(self, listing, seen: list[str]) -> None:
        self.listing, self.seen = listing, seen

    def __iter__(self):
        for entry in self.listing:
            self.seen.append(entry.name)
            yield entry

    def close(self) -> None:
        self.listing.close()


def test_a_skill_s_other_files_are_looked_for_in_its_first_folders_without_recursion(tmp_path: Path) -> None:
    folder = skill(tmp_path, "deep", front("deep"), **{"notes.md": "n"})
    with chain(folder) as bottom:  # deeper than os.walk could go
        (bottom / "far.md").write_text("never reached")
        catalogue, _ = load_skills([tmp_path])
        assert catalogue.skills["deep"].other_files() == [
            "notes.md"
        ]  # past OTHER_FILES_FOLDERS: not looked at


def test_a_load_reads_at_most_its_budget_the_first_dirs_first_and_says_what_it_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cloned repository's 500 skills of 64 KB front matter took 115 s to load, at every prompt, and 500
    # bodies of 256 KB would be 128 MB kept: one load reads a bounded whole, in the dirs' order (agent file,
    # user, then project: a project cannot crowd out the user's skills).
    monkeypatch.setattr(skills, "MAX_SKILLS_BYTES", 1000)
    user, project = tmp_path / "user", tmp_path / "project"
    skill(user, "mine", front("mine", "x" * 300))
    for i in range(5):
        skill(project, f"p{i}", front(f"p{i}", "y" * 300))
    catalogue, warnings = load_skills([user, project])
    assert catalogue.names() == ["mine", "p0"]  # ~350 bytes each: the third would pass 1,000
    assert warnings == [
        "4 skills not loaded: the ones before them hold the most read for one prompt (0 MiB of SKILL.md, "
        "256 KiB of front matter); keep skills short, or fewer in the project"
    ]
    monkeypatch.setattr(skills, "MAX_SKILLS_BYTES", 1 << 20)
    monkeypatch.setattr(skills, "MAX_FRONT_MATTER_TOTAL", 600)
    catalogue, _ = load_skills([user, project])
    assert catalogue.names() == ["mine"]  # front matter counts apart: ~330 characters each


def test_a_skill_read_again_unchanged_is_not_parsed_again_and_an_edit_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every prompt reads every skill: the same text in the same folder, found the same way, is the same
    # Skill, its YAML read once; the load's budget still counts it each time (the test above).
    parsed: list[str] = []
    real = skills._front_matter
    monkeypatch.setattr(skills, "_front_matter", lambda text: parsed.append(text) or real(text))
    folder = skill(tmp_path / "user", "s", front("s"))
    first, _ = load_skills([tmp_path / "user"])
    again, _ = load_skills([tmp_path / "user"])
    assert again.get("s") is first.get("s") and len(parsed) == 1
    (folder / "SKILL.md").write_text(front("s", "Does another thing."))
    edited, _ = load_skills([tmp_path / "user"])
    assert edited.get("s").description == "Does another thing." and len(parsed) == 2
    project, _ = load_skills([skills.SkillDir(tmp_path / "user", "project")])
    assert project.get("s").source == "project" and len(parsed) == 3  # found another way: its own
    monkeypatch.setattr(skills._kept, "weight", 2000)  # what is kept is bounded, the latest kept
    for i in range(20):
        skill(tmp_path / "many", f"m{i:02d}", front(f"m{i:02d}", "z" * 200))
    load_skills([tmp_path / "many"])
    assert sum(len(key[2]) for key in skills._kept) <= 2000
    assert str(tmp_path / "many" / "m19") in [key[0] for key in skills._kept]


def test_the_skills_kept_between_prompts_are_bounded_by_count_and_their_folders_weigh_too(
    tmp_path: Path,
) -> None:
    # Only the texts were weighed: 20,000 small skills in long folders were 660 KiB of the 1 MiB budget and held
    # ~26 MiB. Each kept skill weighs its folder's path and a fixed overhead too, and their number is capped.
    for d in range(3):
        for i in range(400):
            skill(tmp_path / f"d{d}", f"s{i}-{'f' * 150}", "---\ndescription: d\n---\n")
        load_skills([tmp_path / f"d{d}"])
    assert len(skills._kept) <= skills.KEPT_ENTRIES
    weights = [
        len(text) + len(folder) + len(source) + skills.KEPT_OVERHEAD for folder, source, text in skills._kept
    ]
    assert sum(weights) <= skills.KEPT_TEXT
    assert str(tmp_path / "d2" / f"s399-{'f' * 150}") in [key[0] for key in skills._kept]  # the latest kept


def test_front_matter_past_its_bound_is_refused_unread_and_a_flood_of_errors_is_cut(tmp_path: Path) -> None:
    big = "keywords: [" + ", ".join(f"w{i}" for i in range(3000)) + "]\n"  # 20 KB: ~80 ms of YAML each
    for i in range(25):
        skill(tmp_path, f"s{i:02d}", f"---\nname: s{i:02d}\ndescription: d\n{big}---\nbody\n")
    skill(tmp_path, "zz", front("zz"))
    catalogue, warnings = load_skills([tmp_path])
    assert catalogue.names() == ["zz"]  # not crowded out: the refused ones took nothing of the budget
    assert len(warnings) == 21 and "the limit is 16,384" in warnings[0]
    assert warnings[-1] == "5 more SKILL.md files could not be loaded. Skipped."


# --- read_skill -----------------------------------------------------------------


async def read_skill(catalogue: Catalogue | None, tmp_path: Path, **args: str) -> str:
    """read_skill as a turn makes it: with the session's catalogue."""
    tool = ReadSkill(catalogue)
    ctx = ToolContext(session_id="s", call_id="c", cwd=tmp_path, session_dir=tmp_path)
    return (await tool.run(validate(tool.parameters, args, example=tool.example), ctx)).content


async def test_read_skill_gives_the_body_and_the_other_files(tmp_path: Path) -> None:
    folder = skill(
        tmp_path / "skills",
        "release",
        RELEASE_MD,
        **{"scripts/release.sh": "#!/bin/sh\n", "reference.md": "ref", ".draft.md": "hidden"},
    )
    catalogue, _ = load_skills([tmp_path / "skills"])
    text = await read_skill(catalogue, tmp_path, name="release")
    assert text == (
        f"Skill release (folder {folder})\n\n"
        "# Release\n\nRun `scripts/release.sh VERSION --channel=CHANNEL`.\n\n"
        f"Other files of this skill, relative to {folder} (read them with read_file):\n"
        "- reference.md\n- scripts/release.sh"
    )
    assert ReadSkill().echo({"name": "release"}) == "read_skill release"
    assert ReadSkill().tier == "read"


async def test_read_skill_unknown_name_lists_the_skills(tmp_path: Path) -> None:
    skill(tmp_path / "skills", "release", RELEASE_MD)
    skill(tmp_path / "skills", "status", front("status"))
    catalogue, _ = load_skills([tmp_path / "skills"])
    # The names are an enum of read_skill's schema: the contract answers, and a grammar can hold to it.
    assert ReadSkill(catalogue).parameters["properties"]["name"]["enum"] == ["release", "status"]
    assert ReadSkill(catalogue).example == {"name": "release"}
    with pytest.raises(ToolError) as info:
        await read_skill(catalogue, tmp_path, name="relase")
    err = info.value
    assert (err.code, err.field, err.cls, err.reason, err.fix) == (
        "not_in_enum",
        "name",
        "fix_and_retry",
        'name "relase" is not one of release, status. Did you mean release?',
        "Send name as one of: release, status.",
    )
    # The class's own schema is left as it was: another session's catalogue has other names.
    assert "enum" not in ReadSkill.parameters["properties"]["name"]
    # A tool that reaches run with a name the catalogue lost in between still answers with the list.
    tool = ReadSkill(catalogue)
    ctx = ToolContext(session_id="s", call_id="c", cwd=tmp_path, session_dir=tmp_path)
    with pytest.raises(ToolError) as info:
        await tool.run({"name": "relase"}, ctx)
    assert (info.value.code, info.value.fix) == ("unknown_skill", "Use one of: release, status.")


@pytest.mark.parametrize("catalogue", [None, Catalogue()])
async def test_read_skill_without_skills(tmp_path: Path, catalogue: Catalogue | None) -> None:
    with pytest.raises(ToolError) as info:
        await read_skill(catalogue, tmp_path, name="release")
    assert (info.value.code, info.value.cls) == ("no_skills", "terminal")


def test_read_skill_is_offered_with_the_catalogue_only_when_it_holds_a_skill(tmp_path: Path) -> None:
    skill(tmp_path / "skills", "release", RELEASE_MD)
    catalogue, _ = load_skills([tmp_path / "skills"])
    tools = {t.name: t for t in make_builtins(None, catalogue)}
    assert list(tools) == list(BUILTIN_TOOLS)
    assert tools["read_skill"].catalogue is catalogue
    assert catalogue.folders() == (tmp_path / "skills" / "release",)
    assert "read_skill" not in [t.name for t in make_builtins(None, Catalogue())]
