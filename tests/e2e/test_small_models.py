"""What mm does for the small models it serves itself, end to end: a real daemon and the real `mm`, the
scripted model server speaking llama-server's own endpoints (/apply-template, /completion) behind a
provider with ``constrain_calls: true`` — the way mm talks to a llama-server it constrains.

The logic is unit-tested (tests/unit/turn/test_small_models.py, tests/unit/models/test_grammar.py); the
real llama-server and model run in tests/e2e/test_local.py. Here the wire and the daemon are real: the
skill choice with its probabilities, the grammar of each step, the call read back from the text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .conftest import run_mm, write_config

SKILL = """---
name: release-ops
description: How to publish a release of the product.
---

Publish a release: `./actions/release VERSION`. Run exactly one command, then say what it printed.
"""
RELEASE = """#!/bin/sh
echo "$@" >> released.txt
echo "Released $1."
"""


def project(work: Path) -> Path:
    """An agent with bash, one skill and the action it names; returns the agent file."""
    (work / "skills" / "release-ops").mkdir(parents=True)
    (work / "skills" / "release-ops" / "SKILL.md").write_text(SKILL)
    (work / "actions").mkdir()
    (work / "actions" / "release").write_text(RELEASE)
    (work / "actions" / "release").chmod(0o755)
    agent = work / "agent.yaml"
    agent.write_text(
        yaml.safe_dump({"system": "You help.", "builtins": ["bash", "read_skill"], "skills": ["skills"]})
    )
    return agent


def as_llama_server(mm_home: Path, server: Any) -> None:
    """The scripted server as a llama-server mm constrains (config.yaml's ``constrain_calls``)."""
    write_config(
        mm_home,
        {
            "providers": {
                "llama": {"kind": "openai", "base_url": f"{server.url}/v1", "constrain_calls": True}
            },
            "default_model": "llama/scripted",
        },
    )


def completions(server: Any) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests() if r["path"] == "/completion"]


def root_rule(grammar: str) -> str:
    return next(line for line in grammar.splitlines() if line.startswith("root ::="))


def test_a_confident_skill_choice_gives_the_skill_and_the_first_step_must_call(
    mm_home: Path, scripted: Any
) -> None:
    work = mm_home / "work"
    agent = project(work)
    server = scripted(
        [
            {"text": "release-ops", "probabilities": {"release": 0.9, "none": 0.05}},  # the choice
            {"tool_calls": [{"name": "bash", "arguments": {"command": "./actions/release 1.4.2"}}]},
            {"text": "Released 1.4.2."},
        ],
        default=False,
    )
    as_llama_server(mm_home, server)
    result = run_mm("-p", "Publish version 1.4.2.", "--agent", str(agent), "--yolo", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Released 1.4.2."
    assert "skill: release-ops" in result.stderr
    assert (work / "released.txt").read_text() == "1.4.2\n"  # the call, read back from its <tool_call> text

    choice, act, answer = completions(server)
    assert root_rule(choice["grammar"]) == 'root ::= "release-ops" | "none"'
    assert choice["n_probs"] > 0 and choice["temperature"] == 0 and not choice.get("stream")
    assert (
        "Which of these skills applies" in choice["prompt"] and "Publish version 1.4.2." in choice["prompt"]
    )
    # The first real step: the skill's body in the prompt, read_skill gone, and a call required.
    assert "Publish a release: `./actions/release VERSION`" in act["prompt"]
    assert '"read_skill"' not in act["prompt"] and '"bash"' in act["prompt"]
    assert root_rule(act["grammar"]) == "root ::= [ \\t\\n]* block"
    # After the call succeeded: words first.
    assert root_rule(answer["grammar"]) == "root ::= [ \\t\\n]* [^{`< \\t\\n] any*"
    assert "Released 1.4.2." in answer["prompt"]  # the tool's result, rendered by the template

    sessions = json.loads(run_mm("sessions", "list", "--json", cwd=work).stdout)
    shown = json.loads(run_mm("sessions", "show", sessions[0]["id"], "--json", cwd=work).stdout)
    [chosen] = [e["data"] for e in shown["events"] if e["kind"] == "skill_chosen"]
    assert chosen == {**chosen, "skill": "release-ops", "options": ["release-ops"], "probability": 0.9}


def test_a_request_the_model_would_rather_answer_itself_gets_no_skill_and_a_free_step(
    mm_home: Path, scripted: Any
) -> None:
    """The grammar forced "release-ops", but the model's own first tokens were the answer: no skill."""
    work = mm_home / "work"
    agent = project(work)
    server = scripted(
        [
            {"text": "release-ops", "probabilities": {"pong": 0.93, "release": 0.02}},
            {"text": "pong"},
        ],
        default=False,
    )
    as_llama_server(mm_home, server)
    result = run_mm("-p", "Reply with exactly one word: pong", "--agent", str(agent), cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "pong"
    assert "skill:" not in result.stderr
    _, step = completions(server)
    assert root_rule(step["grammar"]) == "root ::= [ \\t\\n]* (block | prose)?"  # words or a call
    assert '"read_skill"' in step["prompt"]  # the model may still read a skill itself
    assert not (work / "released.txt").exists()


def test_under_the_chosen_skill_its_example_value_is_not_run_and_a_guessed_command_hears_the_skills(
    mm_home: Path, scripted: Any
) -> None:
    """The checks of mmd/tools/skillcmds.py through a real daemon and real bash."""
    work = mm_home / "work"
    agent = project(work)
    skill = work / "skills" / "release-ops" / "SKILL.md"
    skill.write_text(skill.read_text() + "Example: `./actions/release 2.0.1`\n")
    server = scripted(
        [
            {"text": "release-ops", "probabilities": {"release": 0.9, "none": 0.05}},
            {"tool_calls": [{"name": "bash", "arguments": {"command": "./actions/release 2.0.1"}}]},
            {"tool_calls": [{"name": "bash", "arguments": {"command": "release 1.4.2"}}]},
            {"tool_calls": [{"name": "bash", "arguments": {"command": "./actions/release 1.4.2"}}]},
            {"text": "Released 1.4.2."},
        ],
        default=False,
    )
    as_llama_server(mm_home, server)
    result = run_mm("-p", "Publish version 1.4.2.", "--agent", str(agent), "--yolo", cwd=work)
    assert result.returncode == 0, result.stderr
    assert (work / "released.txt").read_text() == "1.4.2\n"  # 2.0.1, the skill's example, never ran
    _, _, refused, guessed, _ = completions(server)
    assert 'bash was not run: "2.0.1" is the example value for VERSION' in refused["prompt"]
    assert "release: command not found" in guessed["prompt"]
    assert "The skill release-ops runs this as `./actions/release VERSION`" in guessed["prompt"]


def test_the_chosen_skills_command_is_a_typed_tool_the_model_calls(mm_home: Path, scripted: Any) -> None:
    """mmd/tools/skillcmds.py through a real daemon: `./actions/release VERSION` offered as `release`."""
    work = mm_home / "work"
    agent = project(work)
    skill = work / "skills" / "release-ops" / "SKILL.md"
    skill.write_text(skill.read_text() + "VERSION looks like 2.0.1.\n")  # named in the prose: a placeholder
    server = scripted(
        [
            {"text": "release-ops", "probabilities": {"release": 0.9, "none": 0.05}},
            {"tool_calls": [{"name": "release", "arguments": {"version": "1.4.2"}}]},
            {"text": "Released 1.4.2."},
        ],
        default=False,
    )
    as_llama_server(mm_home, server)
    result = run_mm("-p", "Publish version 1.4.2.", "--agent", str(agent), "--yolo", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Released 1.4.2."
    assert (work / "released.txt").read_text() == "1.4.2\n"
    _, act, _ = completions(server)
    # The model's own template renders the tool, described by the skill's words.
    assert (
        '"release"' in act["prompt"]
        and "the skill release-ops's command `./actions/release VERSION`" in act["prompt"]
    )
    assert '"\\"release\\""' in act["grammar"]  # a call of it is valid by construction


LONG_SYSTEM = (
    "You are the operations helper of this repository. You run the release, status and test commands "
    "of the product for the person at the keyboard, one command at a time, and you say in one sentence "
    "what each printed. You never guess a version, a channel or a service name."
)


def test_a_reply_that_repeats_the_instructions_is_cut_and_asked_again(mm_home: Path, scripted: Any) -> None:
    """llama.py's echo cut through a real daemon: after a call that worked, the reply goes on with the
    system prompt (the 1.5B did so for 400 tokens, 20 s); mm closes the stream once it repeated
    ECHO_RUN characters of it, does not read a call out of it, and asks once more for words."""
    work = mm_home / "work"
    agent = work / "agent.yaml"
    agent.write_text(yaml.safe_dump({"system": LONG_SYSTEM, "builtins": ["bash"]}))
    echo = f"Sure. {LONG_SYSTEM} NEVER-SHOWN " + '{"name": "bash", "arguments": {"command": "touch x"}} ' * 3
    server = scripted(
        [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo up"}}]},
            {"text": echo},
            {"text": "The command printed up."},
        ],
        default=False,
    )
    as_llama_server(mm_home, server)
    result = run_mm("-p", "Is it up?", "--agent", str(agent), "--yolo", "--output-format", "events", cwd=work)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    [ended] = [e["data"] for e in events if e["kind"] == "turn_ended"]
    assert ended["status"] == "ok" and ended["text"] == "The command printed up."
    [unusable] = [e["data"] for e in events if e["kind"] == "unusable_answer"]
    assert unusable["reason"] == "the model's instructions repeated" and unusable["action"] == "ask_again"
    assert "NEVER-SHOWN" not in unusable["text"] and "NEVER-SHOWN" not in result.stdout
    assert not (work / "x").exists()  # nothing recovered from the echo ran
    assert [e["data"]["name"] for e in events if e["kind"] == "tool_call"] == ["bash"]


def bash_project(work: Path) -> Path:
    """An agent with bash only, and a data file to read; returns the agent file."""
    agent = work / "agent.yaml"
    agent.write_text(yaml.safe_dump({"system": "You run commands.", "builtins": ["bash"]}))
    (work / "data.txt").write_text("sensor 3 read 41 units\n")
    return agent


def test_a_reply_that_says_it_ran_a_command_it_never_ran_is_told_and_the_next_step_runs_it(
    mm_home: Path, scripted: Any
) -> None:
    """loop._answer_claim through a real daemon and real bash: the model says "I called the bash tool…"
    with no call (the 0.5B did so after a summary, turn after turn); mm tells it nothing ran, the next
    step must be a call, and the command runs."""
    work = mm_home / "work"
    agent = bash_project(work)
    server = scripted(
        [
            {"text": 'I called the bash tool with the command "cat data.txt". It printed the data.'},
            {"tool_calls": [{"name": "bash", "arguments": {"command": "cat data.txt"}}]},
            {"text": "Sensor 3 read 41 units."},
        ],
        default=False,
    )
    as_llama_server(mm_home, server)
    result = run_mm("-p", "Show me data.txt.", "--agent", str(agent), "--yolo", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Sensor 3 read 41 units."
    assert "the model said it called bash, but no tool ran" in result.stderr
    _, told, answered = completions(server)
    assert "You wrote that you called bash, but no tool was called in this turn" in told["prompt"]
    assert root_rule(told["grammar"]) == "root ::= [ \\t\\n]* block"  # the next step is a call
    assert "sensor 3 read 41 units" in answered["prompt"]  # the command ran; its output was read


def test_a_call_read_from_the_text_is_shown_to_the_model_as_it_wrote_it(mm_home: Path, scripted: Any) -> None:
    """openai.said_message through a real daemon: the next step's prompt holds the model's own fenced call,
    not the template's form of it, so llama-server's prompt cache reaches past it (docs/local.md); the
    session keeps it across a daemon restart."""
    work = mm_home / "work"
    agent = bash_project(work)
    written = '```json\n{"name": "bash", "arguments": {"command": "cat data.txt"}}\n```'
    server = scripted(
        [{"text": written}, {"text": "Sensor 3 read 41 units."}, {"text": "Still 41."}], default=False
    )
    as_llama_server(mm_home, server)
    result = run_mm("-p", "Show me data.txt.", "--agent", str(agent), "--yolo", cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Sensor 3 read 41 units."
    first, second = completions(server)
    assert second["prompt"].startswith(first["prompt"] + written)  # the first prompt, then what it wrote
    assert "<tool_call>" not in second["prompt"]
    assert run_mm("daemon", "stop").returncode == 0
    again = run_mm("-p", "And now?", "--agent", str(agent), "--continue", cwd=work)
    assert again.returncode == 0, again.stderr
    third = completions(server)[-1]
    assert third["prompt"].startswith(second["prompt"])  # the stored session renders as it was sent
