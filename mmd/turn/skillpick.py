"""Skills chosen for the model when a turn starts, for models that cannot route by themselves.

Measured on contrib/eval's skill mode, a small model given a list of skills and
``read_skill`` did not finish once in 60 runs: the 0.5B called the skill's name
as a tool, the 1.5B guessed commands without reading it. So for a model whose
server takes a grammar (a local model: mmd.models.base.Chooser), the turn
starts with one short extra step, constrained to the catalogued skill names and
``none``: "which skill applies to this request?". The chosen skill's body is put
in the turn's system message before the first real step (not in the stored
history: each turn chooses again), ``read_skill`` leaves that turn's tools, and a
``skill_chosen`` event says what was chosen and how long it took. Models that can route keep ``read_skill`` and the
list in the system prompt; nothing is chosen for them.
"""

from __future__ import annotations

import time

from ..models.base import Chooser, Message, ModelError
from ..tools.skillcmds import commands
from ..tools.skills import Catalogue, Skill
from . import skilluse
from .calls import Conversation
from .plan import TurnSetup

NONE = "none"
# Characters of a chosen skill's body put in the system message: about 2,000 tokens, a quarter of an 8k window.
MAX_BODY = 8_000
READ_SKILL = skilluse.READ_SKILL
SKILL_CHOSEN = "skill_chosen"
# The model's probability for the chosen skill's name above which the turn's first step must be a call
# (bench/bench_skillpick.py; docs/loops-and-recovery.md#skills-chosen-for-the-model).
ACT_CONFIDENCE = 0.5
# What the choice shows of each skill's commands besides its description (mmd/tools/skillcmds.py):
# "" nothing, "programs" their names, "templates" the whole commands (bench/bench_skillpick.py --shows).
CHOICE_SHOWS = ""


def choice_messages(skills: Catalogue, names: list[str], prompt: str) -> list[Message]:
    """The short request of the choice: the skills *names* in a line each, then the user's words."""
    lines = [
        "Which of these skills applies to the user's request? Answer with the skill's name only, "
        f"or {NONE} when none applies.",
        "",
        "Skills:",
    ]
    for name in names:
        skill = skills.get(name)
        if skill is not None:
            keywords = f" (keywords: {', '.join(skill.keywords)})" if skill.keywords else ""
            lines.append(f"- {name}: {skill.description.strip()}{keywords}{_commands_note(skill)}")
    lines.append(
        f"- {NONE}: no skill is needed: a greeting, a question of general knowledge, "
        "something to write, explain or compute without acting on this project."
    )
    return [Message(role="system", content="\n".join(lines)), Message(role="user", content=prompt)]


async def begin(session: Conversation, setup: TurnSetup) -> None:
    """Choose the skill that applies to the turn's prompt and read it into the context (see the module)."""
    names = [n for n in setup.skill_names() if n != NONE]  # a skill called "none" cannot be told apart
    skills = setup.skills
    if not setup.choose_skills or not names or skills is None or not isinstance(setup.provider, Chooser):
        return
    prompt = next((m.content for m in reversed(session.messages) if m.role == "user"), "")
    if not prompt.strip():
        return
    started = time.monotonic()
    try:
        choice = await setup.provider.choose(choice_messages(skills, names, prompt), [*names, NONE])
    except ModelError as exc:
        session.emit("warning", {"message": f"choosing a skill failed, the model routes by itself: {exc}"})
        return
    chosen = choice.option if choice.option in names else None
    session.emit(
        SKILL_CHOSEN,
        {
            "skill": chosen,
            "options": names,
            "probability": None if choice.probability is None else round(choice.probability, 3),
            "seconds": round(time.monotonic() - started, 3),
        },
    )
    if chosen is None:
        return
    skill = skills.get(chosen)
    if skill is None:
        return
    # The body goes into this turn's system message, not the history: as a read_skill call in the history
    # the 0.5B copied that call again and again. read_skill leaves the turn's tools, its work done.
    listed = skills.render()
    if listed and listed in setup.system:  # the list that says to call read_skill gives way to the skill
        setup.system = setup.system.replace(listed, skill_text(skill))
    else:
        setup.system = f"{setup.system}\n\n{skill_text(skill)}"
    setup.registry = setup.registry.without(READ_SKILL)
    skilluse.use(session, setup, skill)  # its allowed-tools, if any, limit the turn from its first step
    # A skill says how to act: a small model given one still answered in words, making the result up,
    # in 4 of 30 runs (1.5B). So its first step must be a call — when the choice was confident: a request
    # that no skill covers ("Hi, who are you?") was given the only skill in 3 of 6 cases, and a forced
    # call there would act on nothing asked for. Below ACT_CONFIDENCE the step stays free.
    setup.act_first = choice.probability is not None and choice.probability >= ACT_CONFIDENCE


def _commands_note(skill: Skill) -> str:
    """What the choice shows of the commands a skill names (CHOICE_SHOWS; bench/bench_skillpick.py)."""
    templates = commands(skill.name, skill.body).templates[:8] if CHOICE_SHOWS else ()
    if not templates:
        return ""
    if CHOICE_SHOWS == "templates":
        return " Commands: " + ", ".join(t.text for t in templates) + "."
    names = dict.fromkeys(t.program.rsplit("/", 1)[-1] for t in templates)
    return f" Commands: {', '.join(names)}."


def skill_text(skill: Skill) -> str:
    """How a chosen skill is put in front of the model (a body past MAX_BODY is cut, saying where the rest is)."""
    body = skill.body.strip()
    if len(body) > MAX_BODY:
        body = f"{body[:MAX_BODY]}\n[cut here: the rest is in {skill.folder / 'SKILL.md'}]"
    text = f"The skill {skill.name} applies to this request; follow it. Its instructions:\n\n{body}"
    # The folder only where the skill has files of its own to read: named up front, the 1.5B took it for
    # the place to run the skill's commands from, and ran them there (3 of 30 runs).
    if skill.other_files(cap=1):
        text += f"\n\n(The skill's own files are in {skill.folder}; run commands from the working directory.)"
    return text
