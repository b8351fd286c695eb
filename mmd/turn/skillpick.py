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
from ..tools.skills import Skill
from .calls import Conversation
from .plan import TurnSetup

NONE = "none"
# Characters of a chosen skill's body put in the system message: about 2,000 tokens, a quarter of an 8k window.
MAX_BODY = 8_000
READ_SKILL = "read_skill"
SKILL_CHOSEN = "skill_chosen"


def choice_messages(setup: TurnSetup, prompt: str) -> list[Message]:
    """The short request of the choice: the skills in a line each, then the user's words."""
    assert setup.skills is not None
    lines = [
        "Which of these skills applies to the user's request? Answer with the skill's name only, "
        f"or {NONE} when none applies.",
        "",
        "Skills:",
    ]
    for name in setup.skill_names():
        skill = setup.skills.get(name)
        if skill is not None:
            keywords = f" (keywords: {', '.join(skill.keywords)})" if skill.keywords else ""
            lines.append(f"- {name}: {skill.description.strip()}{keywords}")
    return [Message(role="system", content="\n".join(lines)), Message(role="user", content=prompt)]


async def begin(session: Conversation, setup: TurnSetup) -> None:
    """Choose the skill that applies to the turn's prompt and read it into the context (see the module)."""
    names = [n for n in setup.skill_names() if n != NONE]  # a skill called "none" cannot be told apart
    if not setup.choose_skills or not names or not isinstance(setup.provider, Chooser):
        return
    prompt = next((m.content for m in reversed(session.messages) if m.role == "user"), "")
    if not prompt.strip():
        return
    started = time.monotonic()
    try:
        choice = await setup.provider.choose(choice_messages(setup, prompt), [*names, NONE])
    except ModelError as exc:
        session.emit("warning", {"message": f"choosing a skill failed, the model routes by itself: {exc}"})
        return
    chosen = choice if choice in names else None
    session.emit(
        SKILL_CHOSEN,
        {
            "skill": chosen,
            "options": names,
            "seconds": round(time.monotonic() - started, 3),
        },
    )
    if chosen is None:
        return
    skill = setup.skills.get(chosen) if setup.skills is not None else None
    if skill is None:
        return
    # The body goes into this turn's system message, not the history: as a read_skill call in the history
    # the 0.5B copied that call again and again. read_skill leaves the turn's tools, its work done.
    listed = setup.skills.render() if setup.skills is not None else ""
    if listed and listed in setup.system:  # the list that says to call read_skill gives way to the skill
        setup.system = setup.system.replace(listed, skill_text(skill))
    else:
        setup.system = f"{setup.system}\n\n{skill_text(skill)}"
    setup.registry = setup.registry.without(READ_SKILL)


def skill_text(skill: Skill) -> str:
    """How a chosen skill is put in front of the model (a body past MAX_BODY is cut, saying where the rest is)."""
    body = skill.body.strip()
    if len(body) > MAX_BODY:
        body = f"{body[:MAX_BODY]}\n[cut here: the rest is in {skill.folder / 'SKILL.md'}]"
    return f"The skill {skill.name} applies to this request; follow it. Its instructions (folder {skill.folder}):\n\n{body}"
