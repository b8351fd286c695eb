"""Retries of a model request (mmd.models._http.with_retries) in virtual time: ``autojump_clock``.

A minute of Retry-After or a backoff of several doublings is waited for in full, and the test
takes no real time: trio's clock jumps whenever every task is waiting.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from mmd.models._http import MAX_WAIT, Retry, with_retries
from mmd.models.base import ModelError


class Attempts:
    """An attempt that fails with *failures* (each a Retry) before it answers "ok"."""

    def __init__(self, *failures: Retry) -> None:
        self.failures = list(failures)
        self.times: list[float] = []
        self.retries: list[tuple[int, float, str]] = []

    async def __call__(self) -> str:
        self.times.append(trio.current_time())
        if self.failures:
            raise self.failures.pop(0)
        return "ok"

    def on_retry(self, attempt: int, wait: float, reason: str) -> None:
        self.retries.append((attempt, wait, reason))


def busy(wait: float | None = None) -> Retry:
    return Retry("status 429", hint="Wait, or raise the rate limit.", status=429, wait=wait)


async def retried(attempts: Attempts, max_retries: int = 5, base_delay: float = 1.0) -> str:
    return await with_retries(
        attempts,
        label="test/model",
        max_retries=max_retries,
        base_delay=base_delay,
        on_retry=attempts.on_retry,
    )


async def test_the_wait_a_server_asks_for_is_waited_in_full(autojump_clock: trio.testing.MockClock) -> None:
    attempts = Attempts(busy(30.0), busy(45.0))
    assert await retried(attempts) == "ok"
    start = attempts.times[0]
    assert [t - start for t in attempts.times] == pytest.approx([0.0, 30.0, 75.0])
    assert attempts.retries == [(1, 30.0, "status 429"), (2, 45.0, "status 429")]


async def test_backoff_doubles_with_jitter_up_to_the_longest_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempts = Attempts(*(busy() for _ in range(9)))
    assert await retried(attempts, max_retries=9, base_delay=1.0) == "ok"
    for attempt, wait, _ in attempts.retries:
        ceiling = min(2.0 ** (attempt - 1), MAX_WAIT)
        assert ceiling / 2 <= wait <= ceiling  # jitter: never more, never less than half
    waited = [b - a for a, b in zip(attempts.times, attempts.times[1:], strict=False)]
    assert waited == pytest.approx([wait for _, wait, _ in attempts.retries])
    assert attempts.retries[-1][1] >= MAX_WAIT / 2  # the ninth wait is capped: 2**8 > 60


async def test_spent_retries_are_a_retryable_model_error_that_says_what_to_do(
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempts = Attempts(busy(10.0), busy(10.0), busy(10.0))
    with pytest.raises(ModelError) as info:
        await retried(attempts, max_retries=2)
    assert (
        str(info.value) == "test/model: status 429; gave up after 3 attempts. Wait, or raise the rate limit."
    )
    assert info.value.retryable and info.value.status == 429
    assert len(attempts.times) == 3 and len(attempts.retries) == 2  # no wait after the last attempt
    assert trio.current_time() - attempts.times[0] == pytest.approx(20.0)


async def test_a_cancel_during_a_wait_stops_at_once(autojump_clock: trio.testing.MockClock) -> None:
    attempts = Attempts(busy(MAX_WAIT))
    start = trio.current_time()
    with trio.move_on_after(5.0) as scope:
        await retried(attempts)
    assert scope.cancelled_caught
    assert trio.current_time() - start == pytest.approx(5.0)
    assert len(attempts.times) == 1  # the retry never started
