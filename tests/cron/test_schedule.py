"""Schedules: what parses, what is refused, and when they fire (DST included)."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from rousseau.cron import ScheduleError, parse_schedule, parse_target
from rousseau.cron.targets import TargetError

BERLIN = ZoneInfo("Europe/Berlin")
UTC = ZoneInfo("UTC")


def at(*args: int, tz: ZoneInfo = UTC) -> float:
    return datetime(*args, tzinfo=tz).timestamp()  # type: ignore[misc]


def local(stamp: float, tz: ZoneInfo = BERLIN) -> str:
    return datetime.fromtimestamp(stamp, tz).strftime("%Y-%m-%d %H:%M %z")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("* * *", "cron needs 5 fields"),
        ("* * * * * *", "cron needs 5 fields"),
        ("61 * * * *", "higher than the maximum"),
        ("@sometimes", "unknown schedule '@sometimes'"),
        ("@every", "bad interval"),
        ("@every 0s", "at least 1s"),
        ("@every 5 minutes", "bad interval"),
        ("CRON_TZ=Mars/Olympus 0 9 * * *", "unknown time zone 'Mars/Olympus'"),
        ("CRON_TZ=UTC", "empty schedule"),
        ("", "empty schedule"),
    ],
)
def test_bad_schedules_are_refused_in_one_line(text: str, reason: str) -> None:
    with pytest.raises(ScheduleError, match=reason) as caught:
        parse_schedule(text, "UTC")
    assert "\n" not in str(caught.value)


def test_cron_and_macros_fire_at_their_times() -> None:
    start = at(2026, 11, 30, 8, 59)  # a Monday
    weekday_eight = parse_schedule("0 8 * * 1-5", "UTC").between(start, start + 7 * 86400)
    assert [local(t, UTC) for t in weekday_eight] == [
        f"2026-12-0{d} 08:00 +0000" for d in (1, 2, 3, 4)
    ] + ["2026-12-07 08:00 +0000"]
    hourly = parse_schedule("@hourly", "UTC").between(start, start + 3 * 3600)
    assert [local(t, UTC)[-11:] for t in hourly] == ["09:00 +0000", "10:00 +0000", "11:00 +0000"]
    assert local(parse_schedule("@monthly", "UTC").next_after(start) or 0, UTC) == (
        "2026-12-01 00:00 +0000"
    )


@pytest.mark.parametrize(
    ("field", "days"),
    [
        ("1-5", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("0", ["Sun"]),
        ("7", ["Sun"]),
        ("sat,sun", ["Sat", "Sun"]),
        ("*/2", ["Sun", "Tue", "Thu", "Sat"]),
        ("5-7", ["Fri", "Sat", "Sun"]),
        ("mon-wed", ["Mon", "Tue", "Wed"]),
    ],
)
def test_weekdays_count_from_sunday_as_in_crontab(field: str, days: list[str]) -> None:
    start = at(2026, 11, 29, 12, 0)  # a Sunday, after noon
    fired = parse_schedule(f"0 8 * * {field}", "UTC").between(start, start + 7 * 86400)
    assert sorted(datetime.fromtimestamp(t, UTC).strftime("%a") for t in fired) == sorted(days)


def test_bad_weekdays_are_refused() -> None:
    for field in ("8", "fri-mon", "x", "1-5/0"):
        with pytest.raises(ScheduleError, match="weekday"):
            parse_schedule(f"0 8 * * {field}", "UTC")


def test_every_counts_from_the_anchor() -> None:
    anchor = at(2026, 11, 30, 12, 0, 10)
    every = parse_schedule("@every 1h30m", "UTC", anchor=anchor)
    fired = every.between(anchor, anchor + 5 * 3600)
    assert [t - anchor for t in fired] == [5400, 10800, 16200]
    assert every.next_after(anchor + 5400) == anchor + 10800  # strictly after
    assert parse_schedule("@every 90s", "UTC", anchor=anchor).next_after(anchor) == anchor + 90


def test_a_new_every_job_first_fires_one_interval_after_it_was_made() -> None:
    """The anchor's fraction of a second was once rounded to a microsecond above it, so
    about one new job in twenty fired at once instead of an interval later."""
    made = at(2026, 11, 30, 20, 29, 25) + 0.9474785  # one of the instants that did
    for step in range(2000):
        now = made + step * 0.000_123_7  # fractions of a microsecond
        first = parse_schedule("@every 1h", "UTC", anchor=now).next_after(now)
        assert first == pytest.approx(now + 3600, abs=1e-5)


def test_cron_tz_prefix_overrides_the_default_zone() -> None:
    start = at(2026, 11, 30, 0, 0)
    paris = parse_schedule("CRON_TZ=Europe/Paris 0 9 * * *", "UTC").next_after(start)
    assert local(paris or 0, UTC) == "2026-11-30 08:00 +0000"
    default = parse_schedule("0 9 * * *", "Asia/Tokyo").next_after(start)
    assert local(default or 0, UTC) == "2026-12-01 00:00 +0000"


def test_dst_spring_forward_fires_once_on_the_day() -> None:
    daily = parse_schedule("CRON_TZ=Europe/Berlin 30 2 * * *", "UTC")
    start = at(2026, 3, 28, 12, 0, tz=BERLIN)
    fired = [local(t) for t in daily.between(start, start + 3 * 86400)]
    # 02:30 does not exist on the 29th: it runs once, in the hour after the change
    assert fired == [
        "2026-03-29 03:30 +0200",
        "2026-03-30 02:30 +0200",
        "2026-03-31 02:30 +0200",
    ]


def test_dst_fall_back_does_not_fire_twice() -> None:
    daily = parse_schedule("CRON_TZ=Europe/Berlin 30 2 * * *", "UTC")
    start = at(2026, 10, 24, 12, 0, tz=BERLIN)
    fired = [local(t) for t in daily.between(start, start + 2 * 86400)]
    assert fired == ["2026-10-25 02:30 +0200", "2026-10-26 02:30 +0100"]
    # a job on every hour keeps to real hours through the repeated one
    hourly = parse_schedule("CRON_TZ=Europe/Berlin 0 * * * *", "UTC")
    night = hourly.between(at(2026, 10, 24, 23, 30), at(2026, 10, 25, 3, 30))
    assert [t - night[0] for t in night] == [0, 3600, 7200, 10800]


@pytest.mark.parametrize(
    ("target", "ok"),
    [
        ("telegram:42", True),
        ("telegram:-1001234", True),
        ("telegram:alice", False),
        ("slack:C0123ABC", True),
        ("matrix:!room:example.org", True),
        ("email:you@example.org", True),
        ("email:nobody", False),
        ("sms:+15551234567", True),
        ("sms:5551234567", False),
        ("imessage:iMessage;-;+15551234567", True),
        ("pigeon:1", False),
        ("telegram", False),
    ],
)
def test_targets(target: str, ok: bool) -> None:
    if ok:
        assert parse_target(target)[0] == target.partition(":")[0]
    else:
        with pytest.raises(TargetError):
            parse_target(target)
