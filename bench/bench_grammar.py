"""Does a local model answer plain prompts in words and make action prompts' calls right?

Starts llama-server with a local model (as mmd does: mmd.local.selftest.server_argv) and sends, through
mm's own provider (mmd.models.openai with constrain_calls), prompts that need no tool and prompts that need
one action, each --runs times, with the grammar (llama-server's /apply-template + /completion, the model's
own chat template) and without it (the plain OpenAI endpoint with `tools`). Prints, per variant, how many
plain prompts were answered in words, how many action prompts made exactly the right call, and the mean
seconds of a step.

    python bench/bench_grammar.py --model qwen2.5-coder-0.5b --runs 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import trio
from mmd_child import llama_server

from mmd.config.agent import AgentFile, load_agent_file
from mmd.models.base import Message
from mmd.models.openai import OpenAIProvider
from mmd.models.recovery import recover_completion
from mmd.turn.plan import build_tools, system_prompt

FIXTURE = Path(__file__).resolve().parent.parent / "contrib" / "eval"
PLAIN = [
    "Reply with exactly one word: pong",
    "What is the capital of France?",
    "Explain what a Python list comprehension is, in one sentence.",
    "Hi, who are you?",
]
ACTIONS = [
    ("Release version 1.4.2 to the beta channel.", "release", {"version": "1.4.2", "channel": "beta"}),
    ("Quel est l'état du service billing ?", "status", {"service": "billing"}),
    ("Lance les tests du paquet greet.", "pkgtest", {"package": "greet"}),
    ("Publie la version 1.4.2 sur le canal beta.", "release", {"version": "1.4.2", "channel": "beta"}),
]


async def measure(port: int, constrain: bool, runs: int) -> tuple[int, int, list[float]]:
    provider = OpenAIProvider(
        name="local",
        base_url=f"http://127.0.0.1:{port}/v1",
        model="m",
        constrain_calls=constrain,
        cache_prompt=True,
        max_tokens=512,
    )
    default = build_tools(AgentFile(), FIXTURE)[0]
    declared = build_tools(load_agent_file(FIXTURE / "declared.yaml"), FIXTURE)[0]
    system = system_prompt(None, FIXTURE, "")
    words = right = 0
    seconds: list[float] = []
    try:
        for _ in range(runs):
            for prompt in PLAIN:
                started = time.monotonic()
                done = await provider.complete(
                    [Message(role="system", content=system), Message(role="user", content=prompt)],
                    default.specs(),
                )
                seconds.append(time.monotonic() - started)
                words += not recover_completion(done, default.names()).tool_calls
            for prompt, name, args in ACTIONS:
                started = time.monotonic()
                done = await provider.complete(
                    [Message(role="system", content=system), Message(role="user", content=prompt)],
                    declared.specs(),
                )
                seconds.append(time.monotonic() - started)
                calls = recover_completion(done, declared.names()).tool_calls
                right += len(calls) == 1 and calls[0].name == name and json.loads(calls[0].arguments) == args
    finally:
        await provider.aclose()
    return words, right, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--runs", type=int, default=4)
    opts = parser.parse_args()
    with llama_server(opts.model) as port:
        n_plain, n_act = opts.runs * len(PLAIN), opts.runs * len(ACTIONS)
        for constrain in (True, False):
            words, right, seconds = trio.run(measure, port, constrain, opts.runs)
            label = "grammar (template + /completion)" if constrain else "no grammar (tools to /chat)"
            print(
                f"{opts.model} {label:34} plain prompts in words {words}/{n_plain}, "
                f"action calls right {right}/{n_act}, step mean {statistics.mean(seconds):.2f} s"
            )


if __name__ == "__main__":
    main()
