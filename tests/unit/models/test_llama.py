"""The parts of a llama-server step that need no server: the probability a choice's options hold.

The requests themselves run against the real llama-server in tests/e2e/test_local.py.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from mmd.models.llama import option_mass


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
