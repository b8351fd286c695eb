"""The transcript's timestamps: written as datetime writes them, the date made once a second."""

from __future__ import annotations

import datetime

from mmd.turn import transcript

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _datetime_text(ns: int) -> str:
    return (EPOCH + datetime.timedelta(microseconds=ns // 1000)).isoformat(timespec="milliseconds")


def test_timestamp_is_datetimes_text() -> None:
    for ns in (
        0,
        999_999_999,
        1_000_000_000,
        1_796_480_346_734_754_300,  # 2026-12-05
        1_796_480_346_999_999_999,  # the last ms of that second
        1_796_480_347_000_000_000,  # the next second: the kept date is not reused
        1_796_480_346_001_000_000,  # back in the first: made again
        253_402_300_799_999_000_000,  # 9999-12-31T23:59:59.999
    ):
        assert transcript.timestamp(ns) == _datetime_text(ns), ns


def test_timestamp_within_one_second_keeps_each_millisecond() -> None:
    base = 1_700_000_000 * 1_000_000_000
    texts = [transcript.timestamp(base + ms * 1_000_000) for ms in range(0, 1000, 7)]
    assert texts == [_datetime_text(base + ms * 1_000_000) for ms in range(0, 1000, 7)]
