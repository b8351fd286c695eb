"""Where skills are found, in which order, and what a hostile project's skill folder cannot do; on real folders."""

from __future__ import annotations

import os
from pathlib import Path

from mmd.config.agent import outside_skills
from mmd.tools import skilldirs
from mmd.tools.skilldirs import missing_configured, project_root, skill_dirs
from mmd.tools.skills import MAX_FOLDERS, MAX_SKILL_BYTES, load_skills


def skill(folder: Path, name: str | None, description: str = "Does a thing.", extra: str = "") -> Path:
    folder.mkdir(parents=True)
    head = f"name: {name}\n" if name else ""
    (folder / "SKILL.md").write_text(
        f"---\n{head}description: {description}\n{extra}---\nBody of {folder.name}.\n"
    )
    return folder


def tree(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A home, a config folder, a repository (with .git) and a folder two levels inside it."""
    home, config, repo = tmp_path / "home", tmp_path / "config", tmp_path / "outside" / "repo"
    (repo / ".git").mkdir(parents=True)
    cwd = repo / "pkg" / "app"
    cwd.mkdir(parents=True)
    home.mkdir()
    return home, config, repo, cwd


def load(cwd: Path, home: Path, config: Path, agent_skills: tuple[str, ...] = ()):
    return load_skills(skill_dirs(cwd, config_dir=config, home=home, agent_skills=agent_skills))


def test_skills_are_found_in_every_folder_up_to_the_repository_root(tmp_path: Path) -> None:
    home, config, repo, cwd = tree(tmp_path)
    skill(cwd / ".mm" / "skills" / "a", "here-mm")
    skill(cwd / ".claude" / "skills" / "b", "here-claude")
    skill(cwd / ".agents" / "skills" / "c", "here-agents")
    skill(repo / "pkg" / ".claude" / "skills" / "d", "middle-claude")
    skill(repo / ".agents" / "skills" / "e", "root-agents")
    skill(repo / ".mm" / "skills" / "f", "root-mm")
    skill(tmp_path / "outside" / ".claude" / "skills" / "g", "above-the-root")  # beyond .git: not read
    skill(home / ".claude" / "skills" / "h", "user-claude")
    skill(config / "skills" / "i", "user-mm")
    catalogue, warnings = load(cwd, home, config)
    assert warnings == []
    assert catalogue.names() == [
        "user-mm",
        "user-claude",
        "here-mm",
        "here-claude",
        "here-agents",
        "middle-claude",
        "root-mm",
        "root-agents",
    ]
    sources = {n: s.source for n, s in catalogue.skills.items()}
    assert sources["user-claude"] == "user" and sources["root-agents"] == "project"
    assert catalogue.get("here-claude").folder == cwd / ".claude" / "skills" / "b"


def test_without_a_repository_only_the_working_directory_is_the_project(tmp_path: Path) -> None:
    home, config = tmp_path / "home", tmp_path / "config"
    cwd = tmp_path / "plain" / "dir"
    cwd.mkdir(parents=True)
    skill(cwd / ".claude" / "skills" / "a", "here")
    skill(tmp_path / "plain" / ".claude" / "skills" / "b", "parent")
    assert project_root(cwd) == cwd
    catalogue, _ = load(cwd, home, config)
    assert catalogue.names() == ["here"]


def test_a_worktree_s_git_file_marks_the_root(tmp_path: Path) -> None:
    repo = tmp_path / "wt"
    (repo / "sub").mkdir(parents=True)
    (repo / ".git").write_text("gitdir: /elsewhere/.git/worktrees/wt\n")
    assert project_root(repo / "sub") == repo


def test_priority_agent_file_then_user_then_nearest_project_folder(tmp_path: Path) -> None:
    home, config, repo, cwd = tree(tmp_path)
    agent_dir = skill(tmp_path / "agent-skills" / "x", "deploy", "The agent file's.").parent
    skill(config / "skills" / "x", "deploy", "The user's mm one.")
    skill(config / "skills" / "y", "review", "The user's mm review.")
    skill(home / ".claude" / "skills" / "y", "review", "The user's claude review.")
    skill(repo / ".claude" / "skills" / "y", "review", "The repository's review.")
    skill(repo / ".claude" / "skills" / "z", "lint", "The repository's lint.")
    skill(cwd / ".agents" / "skills" / "z", "lint", "The package's lint.")
    skill(cwd / ".claude" / "skills" / "z", "lint", "The package's claude lint.")
    catalogue, warnings = load(cwd, home, config, (str(agent_dir),))
    described = {n: s.description for n, s in catalogue.skills.items()}
    assert described == {
        "deploy": "The agent file's.",
        "review": "The user's mm review.",  # a cloned repository cannot replace the user's skill
        "lint": "The package's claude lint.",  # nearest folder first; in it, .claude before .agents
    }
    assert all("this one is ignored" in w for w in warnings)
    assert [w.split(": ", 1)[0] for w in warnings] == [
        str(config / "skills" / "x" / "SKILL.md"),
        str(home / ".claude" / "skills" / "y" / "SKILL.md"),
        str(cwd / ".agents" / "skills" / "z" / "SKILL.md"),
        str(repo / ".claude" / "skills" / "y" / "SKILL.md"),
        str(repo / ".claude" / "skills" / "z" / "SKILL.md"),
    ]


def test_one_folder_reached_twice_is_read_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    skill(home / ".claude" / "skills" / "a", "mine")
    (home / ".git").mkdir()  # the home folder is the project: its .claude/skills is the user's too
    catalogue, warnings = load(home, home, tmp_path / "config")
    assert (catalogue.names(), warnings) == (["mine"], [])
    assert catalogue.get("mine").source == "user"


def test_a_folder_reached_through_a_link_is_read_once_and_missing_folders_are_still_listed(
    tmp_path: Path,
) -> None:
    home, config, repo, cwd = tree(tmp_path)
    skill(repo / ".claude" / "skills" / "a", "shared")
    (repo / ".mm").mkdir()
    (repo / ".mm" / "skills").symlink_to(repo / ".claude" / "skills")  # one folder, two names
    dirs = skill_dirs(cwd, config_dir=config, home=home)
    catalogue, warnings = load_skills(dirs)
    assert (catalogue.names(), warnings) == (["shared"], [])  # no "defined twice" warning
    listed = [str(d.path) for d in dirs]
    assert str(repo / ".mm" / "skills") in listed and str(repo / ".claude" / "skills") not in listed
    # The folders that do not exist are still the places to put skills (mm skills list shows them).
    assert str(cwd / ".mm" / "skills") in listed and str(config / "skills") in listed
    assert len(listed) == len(set(listed)) == 2 + 3 * 3 - 1


def test_a_folder_missing_when_listed_is_not_looked_for_again_by_the_load(
    tmp_path: Path, monkeypatch
) -> None:
    # Most of the folders a prompt names do not exist: one failed stat each (it raises), not two.
    home, config, repo, cwd = tree(tmp_path)
    skill(repo / ".claude" / "skills" / "a", "there")
    dirs = skill_dirs(cwd, config_dir=config, home=home)
    assert {str(d.path) for d in dirs if not d.missing} == {str(repo / ".claude" / "skills")}
    looked: list[str] = []
    is_dir = Path.is_dir
    monkeypatch.setattr(Path, "is_dir", lambda self: looked.append(str(self)) or is_dir(self))
    catalogue, warnings = load_skills(dirs)
    assert (catalogue.names(), warnings) == (["there"], [])
    assert str(cwd / ".mm" / "skills") not in looked and str(config / "skills") not in looked


def test_the_folders_paths_are_made_once_a_place_and_whether_each_is_there_asked_each_time(
    tmp_path: Path, monkeypatch
) -> None:
    home, config, repo, cwd = tree(tmp_path)
    first = skill_dirs(cwd, config_dir=config, home=home)
    assert all(d.missing for d in first)
    (cwd / ".mm" / "skills").mkdir(parents=True)  # made between two prompts
    joined: list[Path] = []
    truediv = Path.__truediv__
    monkeypatch.setattr(Path, "__truediv__", lambda self, key: joined.append(self) or truediv(self, key))
    again = skill_dirs(cwd, config_dir=config, home=home)
    assert joined == []  # the same place: no path joined again (project_root joins none either)
    assert [d.path for d in again] == [d.path for d in first]
    assert [str(d.path) for d in again if not d.missing] == [str(cwd / ".mm" / "skills")]
    elsewhere = skill_dirs(repo, config_dir=config, home=home)  # another place: its own folders
    assert str(repo / ".mm" / "skills") in [str(d.path) for d in elsewhere]
    assert str(cwd / ".mm" / "skills") not in [str(d.path) for d in elsewhere]


def test_the_agent_file_s_folders_are_not_kept_with_the_place_s_folders(tmp_path: Path) -> None:
    # skills: comes from a file read without trust: kept with each place, a cloned repository's list was held
    # 32 times over. Another list in the same place reuses the place's folders, the agent's first each time.
    home, config, _, cwd = tree(tmp_path)
    skilldirs._candidates.cache_clear()
    for i in range(5):
        dirs = skill_dirs(cwd, config_dir=config, home=home, agent_skills=(str(tmp_path / f"agent{i}"),))
        assert (str(dirs[0].path), dirs[0].source) == (str(tmp_path / f"agent{i}"), "agent file")
        assert str(dirs[1].path) == str(config / "skills")
    assert skilldirs._candidates.cache_info().currsize == 1


def test_a_project_skill_that_resolves_outside_the_repository_is_skipped(tmp_path: Path) -> None:
    home, config, repo, cwd = tree(tmp_path)
    secret = skill(tmp_path / "elsewhere" / "secret", "secret", "Outside the repository.")
    skills = repo / ".claude" / "skills"
    skills.mkdir(parents=True)
    (skills / "linked").symlink_to(secret)  # a skill folder pointing out
    md_only = skills / "md-only"
    md_only.mkdir()
    (md_only / "SKILL.md").symlink_to(secret / "SKILL.md")  # a SKILL.md pointing out
    (cwd / ".mm").mkdir()
    (cwd / ".mm" / "skills").symlink_to(tmp_path / "elsewhere")  # the skills folder itself pointing out
    skill(home / ".claude" / "skills" / "mine", None)
    (home / ".claude" / "skills" / "shared").symlink_to(secret)  # the user's own may point anywhere
    catalogue, warnings = load(cwd, home, config)
    assert catalogue.names() == ["mine", "secret"]
    assert catalogue.get("secret").folder == home / ".claude" / "skills" / "shared"
    outside = [w for w in warnings if "outside" in w]
    assert len(outside) == 3, warnings
    assert all(f"outside {os.path.realpath(repo)}: a project's skill must stay inside" in w for w in outside)


def test_a_huge_skill_md_is_skipped_after_one_bounded_read(tmp_path: Path) -> None:
    folder = tmp_path / "skills" / "huge"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: huge\ndescription: x\n---\n" + "y" * MAX_SKILL_BYTES)
    catalogue, warnings = load_skills([tmp_path / "skills"])
    assert len(catalogue) == 0
    assert warnings == [
        f"{folder / 'SKILL.md'}: is over {MAX_SKILL_BYTES:,} bytes, the most read: keep the instructions "
        "short and put long references in other files of the skill, read when needed; skill skipped."
    ]


def test_a_skills_folder_with_too_many_entries_is_read_up_to_the_limit(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skill(skills / "aaa", "aaa")
    for i in range(MAX_FOLDERS + 10):
        (skills / f"junk-{i:05}").mkdir()
    with os.scandir(skills) as listing:  # the listing stops at the limit: the file system's first are taken
        taken = sorted([entry.name for entry in listing][:MAX_FOLDERS])
    catalogue, warnings = load_skills([skills])
    assert catalogue.names() == (["aaa"] if "aaa" in taken else [])
    assert warnings[0] == (
        f"{skills}: more than {MAX_FOLDERS} entries; only the first {MAX_FOLDERS} the file system lists are "
        f"read as skills (from {taken[0]} to {taken[-1]} by name; the same ones while the folder is unchanged): "
        "a skills folder holds one folder per skill"
    )
    assert len(warnings) == 1 + 20 + 1  # the limit, 20 folders one by one, then the rest in one line
    without = MAX_FOLDERS - ("aaa" in taken)
    assert warnings[-1] == f"{skills}: {without - 20} more folders without SKILL.md. Skipped."


def test_a_missing_name_is_the_folder_s_as_in_claude_code(tmp_path: Path) -> None:
    skill(tmp_path / "skills" / "pdf-forms", None)
    skill(tmp_path / "skills" / "Bad_Name", None)
    catalogue, warnings = load_skills([tmp_path / "skills"])
    assert catalogue.names() == ["pdf-forms"]
    assert warnings == [
        f"{tmp_path / 'skills' / 'Bad_Name' / 'SKILL.md'}: name: is missing and the folder's name 'Bad_Name' "
        "is no skill name (lowercase letters, digits and hyphens): add name: to the front matter; skill skipped."
    ]


def test_allowed_tools_are_kept_as_written(tmp_path: Path) -> None:
    skill(tmp_path / "s" / "a", "a", extra="allowed-tools: Read, Grep  Bash(git log:*) Bash(npm test)\n")
    skill(tmp_path / "s" / "b", "b", extra="allowed-tools: [Read, 'Bash(git:*)']\n")
    skill(tmp_path / "s" / "c", "c", extra="allowed-tools: ''\n")
    catalogue, warnings = load_skills([tmp_path / "s"])
    assert warnings == []
    assert catalogue.get("a").allowed_tools == ("Read", "Grep", "Bash(git log:*)", "Bash(npm test)")
    assert catalogue.get("b").allowed_tools == ("Read", "Bash(git:*)")
    assert catalogue.get("c").allowed_tools == ()  # written, and empty: no tool
    assert (
        skill(tmp_path / "d" / "d", "d") and load_skills([tmp_path / "d"])[0].get("d").allowed_tools is None
    )


def test_a_configured_folder_that_does_not_exist_is_named_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    (tmp_path / "there").mkdir()
    agent = str(tmp_path / "mm.yaml")
    paths = [str(tmp_path / "there"), str(tmp_path / "gone"), str(tmp_path / "a-file")]
    assert missing_configured(agent, paths, [3, 4, None]) == [
        f"{agent}:4: skills[1]: {tmp_path / 'gone'} does not exist, so no skills are read from it; expected a "
        "folder of skill folders (each with a SKILL.md): create it, fix the path (relative paths start at the "
        "agent file's folder), or remove the entry",
        f"{agent}: skills[2]: {tmp_path / 'a-file'} is not a folder, so no skills are read from it; expected a "
        "folder of skill folders (each with a SKILL.md): create it, fix the path (relative paths start at the "
        "agent file's folder), or remove the entry",
    ]


def test_a_project_agent_files_skills_folder_is_confined_as_the_projects_own(tmp_path: Path) -> None:
    # The folder itself is inside, a skill in it links out: no skill, as in .claude/skills. The same folder
    # from an agent file of the config folder (or none: the test's default) is the person's, and followed.
    home, config, repo, cwd = tree(tmp_path)
    secret = skill(tmp_path / "elsewhere" / "deploy", "deploy", "Another project's.")
    (repo / "skills").mkdir()
    (repo / "skills" / "deploy").symlink_to(secret)
    agent_file = str(repo / "mm.yaml")
    dirs = skill_dirs(
        cwd, config_dir=config, home=home, agent_skills=(str(repo / "skills"),), agent_file=agent_file
    )
    catalogue, warnings = load_skills(dirs)
    assert catalogue.names() == []
    assert f"outside {os.path.realpath(repo)}: a project's skill must stay inside" in warnings[0]
    # A folder leading out is a power of the file (config/agent.py): used only once it was trusted.
    assert outside_skills(agent_file, [str(tmp_path / "elsewhere")], config) == [
        os.path.realpath(tmp_path / "elsewhere")
    ]
    dirs = skill_dirs(
        cwd, config_dir=config, home=home, agent_skills=(str(tmp_path / "elsewhere"),), agent_file=agent_file
    )
    assert load_skills(dirs)[0].names() == ["deploy"]
    for mine in (str(config / "agents" / "a.yaml"), None):
        dirs = skill_dirs(
            cwd, config_dir=config, home=home, agent_skills=(str(repo / "skills"),), agent_file=mine
        )
        assert load_skills(dirs)[0].names() == ["deploy"]
