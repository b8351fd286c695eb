"""The parts of a llama-server step that need no server: the probability a choice's options hold, and the
cut of a reply that repeats the prompt's instructions.

The requests themselves run against the real llama-server in tests/e2e/test_local.py.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec
import pytest

from mmd.models.llama import ECHO_RUN, CompletionStream, instructions, option_mass


def top(*pairs: tuple[str, float]) -> list[dict[str, Any]]:
    """llama-server's ``completion_probabilities`` of one generated token with these top tokens."""
    return [
        {
            "token": pairs[0][0],
            "logprob": math.log(pairs[0][1]),
            "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in pairs],
        }
    ]


OPTIONS = ["release-ops", "platform-ops", "none"]


def test_the_mass_counts_every_token_that_begins_an_option() -> None:
    probs = top(("release", 0.5), ("platform", 0.2), ("re", 0.05), ("none", 0.1), ("Release", 0.1))
    assert option_mass(probs, OPTIONS) == pytest.approx(0.85)  # "Release" begins no option
    assert option_mass(probs, ["release-ops"]) == pytest.approx(0.55)


def test_a_model_that_would_answer_the_request_itself_puts_little_on_the_options() -> None:
    assert option_mass(top(("pong", 0.93), ("ping", 0.03), ("none", 0.001)), OPTIONS) == pytest.approx(0.001)


@pytest.mark.parametrize(
    "probabilities",
    [None, [], "x", [1], [{}], [{"top_logprobs": "x"}], [{"top_logprobs": None}]],
)
def test_a_server_that_says_nothing_of_probabilities_gives_none(probabilities: Any) -> None:
    assert option_mass(probabilities, OPTIONS) is None


def test_odd_entries_count_for_nothing_and_the_mass_never_passes_one() -> None:
    probs = [
        {
            "top_logprobs": [
                {"token": "release", "logprob": 0.5},  # a positive log-probability counts as 1
                {"token": "platform", "logprob": 0.0},
                {"token": "none", "logprob": float("nan")},
                {"token": "none", "logprob": True},
                {"token": "", "logprob": -0.1},  # an empty token begins every option: not counted
                {"token": 3, "logprob": -0.1},
                "release",
            ]
        }
    ]
    assert option_mass(probs, OPTIONS) == 1.0


# -- a reply that repeats the prompt's instructions ------------------------------------------------

PREAMBLE = (
    "<|im_start|>system\nYou help.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
    'query.\n<tools>\n{"type": "function", "function": {"name": "release", "description": "Publish a release '
    'of the product to one channel. Changes files or state.", "parameters": {"type": "object"}}}\n</tools>'
    "<|im_end|>\n"
)
PROMPT = PREAMBLE + "<|im_start|>user\nWhat is the status of billing?<|im_end|>\n<|im_start|>assistant\n"
MESSAGES = [
    {"role": "system", "content": "You help."},
    {"role": "user", "content": "What is the status of billing?"},
]


def test_the_instructions_are_the_prompt_before_the_first_user_message() -> None:
    assert instructions(PROMPT, MESSAGES) == PREAMBLE + "<|im_start|>user\n"
    assert instructions(PROMPT, [{"role": "user", "content": "not in the prompt"}]) == ""
    assert instructions(PROMPT, [{"role": "system", "content": "You help."}]) == ""  # no user message
    assert instructions(PROMPT, None) == ""
    # The provider's kept forms are encoded (openai.Wire): the same answer.
    assert instructions(PROMPT, [msgspec.Raw(msgspec.json.encode(m)) for m in MESSAGES]) == PREAMBLE + (
        "<|im_start|>user\n"
    )


def stream_of(text: str, told: str, *, piece: int = 4) -> tuple[CompletionStream, list[str], bool]:
    """Feed *text* in pieces of *piece* characters, as llama-server streams tokens; the stream, what it
    handed on, and whether it ended before the server's own stop event."""
    shown: list[str] = []
    stream = CompletionStream(shown.append, "local", told)
    for start in range(0, len(text), piece):
        if stream.feed("", json.dumps({"content": text[start : start + piece]})):
            stream.flush()
            return stream, shown, True
    stream.feed("", json.dumps({"content": "", "stop": True, "stop_type": "eos"}))
    stream.flush()
    return stream, shown, False


def test_a_reply_that_goes_on_with_the_tool_preamble_is_cut_once_it_repeated_a_long_run() -> None:
    echo = PREAMBLE[PREAMBLE.index("You may call") :] + "\nmore and more of it"
    stream, shown, cut = stream_of("The service is up. " + echo, instructions(PROMPT, MESSAGES))
    assert cut and stream.cut and stream.finish_reason == "echo"
    text = stream.completion().text
    assert len(text) < len("The service is up. ") + ECHO_RUN + 4  # cut within a piece of the run's end
    assert "more and more" not in "".join(shown)


@pytest.mark.parametrize(
    "reply",
    [
        # Quoting a description for a phrase is an answer.
        'release "publishes a release of the product to one channel"; it changes files or state.',
        # The tool result and the user's words are not instructions: quoting them at length is an answer.
        "What is the status of billing? " * 20,
    ],
)
def test_an_answer_that_quotes_a_little_of_the_prompt_is_not_cut(reply: str) -> None:
    stream, shown, cut = stream_of(reply, instructions(PROMPT, MESSAGES))
    assert not cut and not stream.cut and stream.finish_reason == "stop"
    assert "".join(shown) == reply


def test_without_instructions_nothing_is_cut() -> None:
    stream, _, cut = stream_of(PREAMBLE * 2, "")
    assert not cut and stream.finish_reason == "stop"


def test_a_stop_event_whose_counts_are_no_counts_drops_them_and_the_step_can_be_stored() -> None:
    stream = CompletionStream(None, "local")
    end = {"content": "hi", "stop": True, "tokens_evaluated": 10**40, "tokens_predicted": 7}
    assert stream.feed("", json.dumps({**end, "timings": {"cache_n": 10**40, "predicted_n": 7}}))
    done = stream.completion()
    assert (done.usage.input_tokens, done.usage.output_tokens) == (0, 7)
    assert done.timings is not None and (done.timings.cached_tokens, done.timings.gen_tokens) == (0, 7)
    msgspec.msgpack.encode(done)  # as the step's event is stored: 10**40 was an OverflowError there
