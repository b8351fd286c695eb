"""Where skills are looked for, in priority order, and warnings about configured folders that are missing.

The first skill of a name wins (mmd/tools/skills.py), so the order is the priority:

1. the agent file's ``skills:`` folders, in the file's order — named on purpose for this agent;
2. the user's folders: ``$XDG_CONFIG_HOME/mm/skills``, then ``~/.claude/skills``;
3. the project's folders, from the working directory up to the repository root (the nearest folder
   holding ``.git``; without one, the working directory alone), nearest first; in each folder
   ``.mm/skills``, then ``.claude/skills``, then ``.agents/skills``.

The user's skills come before the project's as in Claude Code (personal overrides project): a cloned
repository cannot replace a skill the user wrote by shipping one of the same name. Nearest first, so a
package of a monorepo can refine a skill of the whole repository. mm's folder before Claude's before the
shared ``.agents``: the most specific to this tool first. A project's skills must stay inside the
repository root once symlinks are resolved (``SkillDir.confine``); the user's may point anywhere, being the
user's own. So may the agent file's when the file is in the user's config folder; any other agent file is
its project's: each ``skills:`` folder inside its project is confined to it as the project's own are, and
one that leads out of it is a power of the file (config/agent.py's ``outside_skills`` and ``powers``), used
only once the person trusted the file (naming it with ``--agent`` does).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ..config.agent import agent_project, skills_confine
from ..paths import project_root
from .skills import SkillDir

# The project's skill folders of each folder from the working directory up, in priority order.
PROJECT_FOLDERS = (".mm/skills", ".claude/skills", ".agents/skills")


def skill_dirs(
    cwd: Path,
    *,
    config_dir: Path,
    home: Path,
    agent_skills: Sequence[str] = (),
    agent_file: str | None = None,
) -> list[SkillDir]:
    """Every folder searched for skills in *cwd*, in priority order (see the module), each folder once;
    *agent_file*: the file *agent_skills* come from (a project's confines them: config.agent.agent_project)."""
    # The agent file's folders are made each time, never kept: skills: inside the project is no power, so a
    # cloned repository's file names them unasked, and kept with each place they held up to 20,000 paths 32
    # times over (~300 MiB). Its folders are few (config.agent.MAX_SKILL_FOLDERS), most often none.
    root = agent_project(agent_file, config_dir)
    named = [SkillDir(Path(p), "agent file", confine=skills_confine(p, root)) for p in agent_skills]
    return _once([*named, *_candidates(cwd, project_root(cwd), config_dir, home)])


@functools.lru_cache(maxsize=32)
def _candidates(cwd: Path, root: Path, config_dir: Path, home: Path) -> tuple[SkillDir, ...]:
    # The user's and the project's folders' paths, made once for each place a prompt runs in (a path joined
    # cost ~5,000 instructions, a dozen a prompt); whether each is there is asked every time (_once).
    found = [SkillDir(config_dir / "skills", "user"), SkillDir(home / ".claude" / "skills", "user")]
    folder = cwd
    while True:
        found += [SkillDir(folder / sub, "project", confine=root) for sub in PROJECT_FOLDERS]
        if folder == root or folder == folder.parent:
            break
        folder = folder.parent
    return tuple(found)


def _once(dirs: Sequence[SkillDir]) -> list[SkillDir]:
    """The first of the folders that are one (a symlink, or the home folder as the project).

    A folder that exists is known by its device and inode: one stat, where resolving its path cost ~70
    Python calls, for each of the five or more folders every prompt looks at (most of them missing). A
    missing one by its path as written: two missing paths that would be one folder through a link are
    both listed (``mm skills list``), and hold no skill either way; each is marked ``missing``, so that
    loading the skills does not look for it again (a failed stat raises: ~7,000 instructions each)."""
    seen: set[object] = set()
    kept = []
    for d in dirs:
        try:
            st = os.stat(d.path)
            key: object = (st.st_dev, st.st_ino)
        except (OSError, ValueError):
            key = str(d.path)
            d = msgspec.structs.replace(d, missing=True)
        if key not in seen:
            seen.add(key)
            kept.append(d)
    return kept


def missing_configured(
    agent_file: str | None, skills: Sequence[str], lines: Sequence[int | None]
) -> list[str]:
    """A warning for each ``skills:`` entry of the agent file that is not a folder (or a SKILL.md's)."""
    warnings = []
    for i, path in enumerate(skills):
        line = lines[i] if i < len(lines) else None
        where = f"{agent_file}:{line}" if line else str(agent_file)
        p = Path(path)
        if not p.exists():
            problem = "does not exist"
        elif not p.is_dir():
            problem = "is not a folder"
        else:
            continue
        warnings.append(
            f"{where}: skills[{i}]: {path} {problem}, so no skills are read from it; "
            "expected a folder of skill folders (each with a SKILL.md): create it, fix the path "
            "(relative paths start at the agent file's folder), or remove the entry"
        )
    return warnings
