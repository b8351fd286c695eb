"""Does a local model choose the right skill, or none, for a prompt (mmd/turn/skillpick.py)?

Starts llama-server with a local model (as mmd does: mmd.local.selftest.server_argv) and asks mm's own
skill choice — one greedy step constrained to the catalogued skill names and "none" — for prompts with a
known answer: the prompts of both eval fixtures (contrib/eval, contrib/eval-ops: English, French, German),
each of which one of their two skills covers, and prompts that no skill covers. The catalogue holds both
fixtures' skills and two more written here, so a choice is one of five, not a yes or no.

Prints, per model, with all skills and then with each fixture's skill alone (as its eval's skill mode
has it): prompts whose skill was chosen, unrelated prompts answered "none", how many choices would force
the turn's first step to be a call (the choice's probability at least skillpick.ACT_CONFIDENCE), the wrong
choices, and the mean seconds of a choice.

    python bench/bench_skillpick.py --model qwen2.5-coder-0.5b
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import trio
import yaml
from mmd_child import llama_server

from mmd.models.openai import OpenAIProvider
from mmd.tools.skills import load_skills
from mmd.turn import skillpick

ROOT = Path(__file__).resolve().parent.parent / "contrib"
FIXTURES = {"eval": "release-ops", "eval-ops": "platform-ops"}
# Two more skills, so the choice is among several; the prompts below name none of their words.
EXTRA = {
    "commit-messages": (
        "How to write a commit message in this project's style.",
        "Subject in the imperative, at most 72 characters; a blank line; then why the change was made.",
    ),
    "python-style": (
        "The Python style of this project: formatting, naming, type hints.",
        "Run `ruff format`; names in snake_case; every public function has type hints.",
    ),
}
UNRELATED = [
    "Reply with exactly one word: pong",
    "What is 17 times 23?",
    "Write a haiku about autumn.",
    "Explique ce qu'est une liste chaînée, en une phrase.",
    "Was ist die Hauptstadt von Frankreich?",
    "Hi, who are you?",
]


def labelled(fixtures: list[str]) -> list[tuple[str, str]]:
    """(prompt, the skill that covers it) for every prompt of *fixtures*, then (prompt, "none")."""
    out = []
    for fixture in fixtures:
        spec = yaml.safe_load((ROOT / fixture / "eval.yaml").read_text())
        out += [(prompt, FIXTURES[fixture]) for case in spec["cases"] for prompt in case["prompts"].values()]
    return out + [(prompt, skillpick.NONE) for prompt in UNRELATED]


def skills_folder(into: Path) -> Path:
    """A skills folder with the fixtures' skills (symlinked) and the extra ones (written)."""
    for fixture, skill in FIXTURES.items():
        (into / skill).symlink_to(ROOT / fixture / "skills" / skill)
    for name, (description, body) in EXTRA.items():
        (into / name).mkdir()
        (into / name / "SKILL.md").write_text(
            f"---\nname: {name}\ndescription: {json.dumps(description)}\n---\n\n{body}\n"
        )
    return into


async def measure(port: int, folder: Path, only: list[str] | None = None) -> None:
    """Print how the choice fares among the skills of *folder* (*only* these skills, when given)."""
    provider = OpenAIProvider(
        name="local",
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        constrain_calls=True,
        cache_prompt=True,
    )
    skills, _ = load_skills([folder])
    names = only or list(skills.skills)
    fixtures = [f for f, skill in FIXTURES.items() if skill in names]
    hits = nones = total_skill = total_none = acting = forced = 0
    wrong: list[str] = []
    seconds: list[float] = []
    try:
        for prompt, expected in labelled(fixtures):
            started = time.monotonic()
            choice = await provider.choose(skillpick.choice_messages(skills, names, prompt), [*names, "none"])
            chosen = choice.option
            seconds.append(time.monotonic() - started)
            # Whether the turn's first step would be a forced call (skillpick.begin).
            acts = chosen != skillpick.NONE and (choice.probability or 0.0) >= skillpick.ACT_CONFIDENCE
            if expected == skillpick.NONE:
                total_none += 1
                nones += chosen == skillpick.NONE
                forced += acts
            else:
                total_skill += 1
                hits += chosen == expected
                acting += chosen == expected and acts
            if chosen != expected:
                p = "-" if choice.probability is None else f"{choice.probability:.2f}"
                wrong.append(f"{prompt!r}: {chosen} (p {p}; expected {expected})")
    finally:
        await provider.aclose()
    print(
        f"among {', '.join(names)}: skill prompts given their skill {hits}/{total_skill}, "
        f"unrelated prompts given none {nones}/{total_none}"
    )
    print(
        f"  first step forced to act: {acting} of the {hits} right skills, "
        f"{forced} of the {total_none - nones} unrelated prompts given a skill"
    )
    print(f"  choice mean {statistics.mean(seconds):.2f} s")
    for line in wrong:
        print("  wrong:", line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument(
        "--shows",
        choices=["none", "programs", "templates"],
        default=skillpick.CHOICE_SHOWS or "none",
        help="what the choice shows of each skill's commands (skillpick.CHOICE_SHOWS)",
    )
    opts = parser.parse_args()
    skillpick.CHOICE_SHOWS = "" if opts.shows == "none" else opts.shows
    with llama_server(opts.model) as port, tempfile.TemporaryDirectory() as tmp:
        print(f"{opts.model}, the choice shows the skills' commands: {opts.shows}")
        folder = skills_folder(Path(tmp))
        trio.run(measure, port, folder)  # all skills: the choice is one of five
        for skill in FIXTURES.values():  # each fixture's own skill alone, as in its eval's skill mode
            trio.run(measure, port, folder, [skill])


if __name__ == "__main__":
    main()
