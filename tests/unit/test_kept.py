"""What the daemon keeps between prompts (mmd/kept.py): bounded by number and weight, the least recently used
let go first, a key kept twice weighed once."""

from __future__ import annotations

import threading

from mmd.kept import Kept


def test_the_least_recently_used_go_first_past_either_bound() -> None:
    kept: Kept[str, int] = Kept(entries=3, weight=100, weigh=len)
    for key in ("a", "b", "c"):
        kept.put(key, 1)
    assert kept.get("a") == 1  # used: now the most recent
    kept.put("d", 1)
    assert list(kept) == ["c", "a", "d"] and kept.get("b") is None
    kept.put("x" * 99, 2)  # over the weight: the oldest go until it fits
    assert list(kept) == ["d", "x" * 99] and kept.held == 100


def test_a_key_kept_again_is_weighed_once_and_a_missing_value_is_told_apart() -> None:
    kept: Kept[str, object] = Kept(entries=10, weight=10, weigh=len)
    for _ in range(5):
        kept.put("abc", None)
    assert kept.held == 3 and len(kept) == 1
    missing = object()
    assert kept.get("abc", missing) is None and kept.get("zzz", missing) is missing
    kept.put("abc", 1, weight=7)  # told its weight (a key that cannot tell it): the old weight goes
    assert kept.held == 7 and kept.get("abc") == 1
    kept.put("d", 2, weight=4)  # 11 > 10: the least recently used goes
    assert list(kept) == ["d"] and kept.held == 4


def test_threads_keeping_at_once_leave_the_weight_true() -> None:
    kept: Kept[str, int] = Kept(entries=50, weight=10_000, weigh=len)

    def work(n: int) -> None:
        for i in range(2_000):
            kept.put(f"{n}-{i % 120}", i)
            kept.get(f"{n}-{(i * 7) % 120}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(kept) <= 50 and kept.held == sum(len(k) for k in kept)
