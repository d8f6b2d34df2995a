"""Durations and timestamps as Google's APIs write them (`components.durations`)."""

from __future__ import annotations

from components.durations import duration_seconds, timestamp_seconds


def test_a_duration_is_a_number_of_seconds_and_s():
    assert duration_seconds("3600s") == 3600.0 and duration_seconds("0.5s") == 0.5
    for wrong in ("3600", "1h", "-5s", "s", "1e999s", ""):
        assert duration_seconds(wrong) is None, wrong


def test_a_timestamp_in_rfc_3339_is_seconds_since_the_epoch():
    assert timestamp_seconds("1970-01-01T00:01:00Z") == 60.0
    assert timestamp_seconds("2026-11-26T10:00:00.250000Z") - \
        timestamp_seconds("2026-11-26T10:00:00Z") == 0.25
