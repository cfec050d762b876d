"""Schedules: 5-field cron, `@hourly` and friends, `@every 90s|5m|1h30m`, with an optional
`CRON_TZ=Zone ` prefix. Fire times come from APScheduler 3's triggers, which know calendars
and DST; the job table, not APScheduler, decides what runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

if TYPE_CHECKING:
    from apscheduler.triggers.base import BaseTrigger

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_EVERY = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_EPOCH = datetime(2000, 1, 1, tzinfo=ZoneInfo("UTC"))


class ScheduleError(ValueError):
    """A schedule that cannot be parsed; the message is one line for the user."""


def zone(name: str) -> tzinfo:
    """A time zone by IANA name; `local` is this machine's."""
    if name == "local":
        from tzlocal import get_localzone

        return get_localzone()
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r} (use an IANA name like Europe/Paris)"
        ) from None


def parse_every(text: str) -> timedelta:
    match = _EVERY.match(text)
    if not text or match is None or not any(match.groups()):
        raise ScheduleError(f"bad interval {text!r}: use e.g. 90s, 5m or 1h30m")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    every = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    if every < timedelta(seconds=1):
        raise ScheduleError(f"bad interval {text!r}: at least 1s")
    return every


@dataclass(frozen=True)
class Schedule:
    text: str
    timezone: tzinfo
    trigger: BaseTrigger
    fixed_hours: bool = False

    def next_after(self, moment: float) -> float | None:
        """The first fire time strictly after `moment` (epoch seconds).

        Arithmetic is on absolute time (aware datetimes add in wall time and lose the fold).
        When clocks go back, a fixed-hour job fires at the first of the two equal wall times
        only, as cron does; jobs on every hour keep to real hours."""
        probe = moment
        for _ in range(4):
            after = datetime.fromtimestamp(probe + 1e-6, self.timezone)
            found = self.trigger.get_next_fire_time(None, after)
            if found is None:
                return None
            stamp = float(found.timestamp())
            # Fire times are a second apart at least; one a hair above `moment` is `moment`
            # rounded to a datetime's microsecond (a job made at `moment` would fire at once).
            if stamp - moment > 1e-3 and not (self.fixed_hours and _second_occurrence(found)):
                return stamp
            probe = max(probe, stamp)
        return None

    def between(self, start: float, end: float, limit: int = 10_000) -> list[float]:
        """Fire times in (start, end], oldest first, at most `limit` (the newest kept)."""
        times: list[float] = []
        moment = start
        while (found := self.next_after(moment)) is not None and found <= end:
            times.append(found)
            if len(times) > limit:
                del times[0]
            moment = found
        return times


def parse_schedule(text: str, default_timezone: str = "local", anchor: float = 0.0) -> Schedule:
    """Parse a schedule; `@every` intervals count from `anchor` (epoch seconds; default a
    fixed epoch, so a job's fire times do not move when it is re-read)."""
    from apscheduler.triggers.cron import CronTrigger
    from apscheduler.triggers.interval import IntervalTrigger

    spec = " ".join(text.split())
    tz_name = default_timezone
    if spec.startswith("CRON_TZ="):
        first, _, spec = spec.partition(" ")
        tz_name = first.removeprefix("CRON_TZ=")
    if not spec:
        raise ScheduleError(f"empty schedule {text!r}")
    tz = zone(tz_name)
    trigger: BaseTrigger
    if spec.startswith("@every"):
        every = parse_every(spec.removeprefix("@every").strip())
        start = datetime.fromtimestamp(anchor, tz) if anchor else _EPOCH.astimezone(tz)
        trigger = IntervalTrigger(seconds=int(every.total_seconds()), start_date=start, timezone=tz)
    else:
        if spec.startswith("@"):
            if spec not in MACROS:
                known = ", ".join([*MACROS, "@every"])
                raise ScheduleError(f"unknown schedule {spec!r}: use 5 fields or one of {known}")
            spec = MACROS[spec]
        fields = spec.split()
        if len(fields) != 5:
            raise ScheduleError(
                f"bad schedule {spec!r}: cron needs 5 fields (minute hour day month weekday)"
            )
        fields[4] = _weekdays(fields[4], spec)
        minute, hour, day, month, weekday = fields
        try:
            trigger = CronTrigger(
                minute=minute, hour=hour, day=day, month=month, day_of_week=weekday, timezone=tz
            )
        except ValueError as exc:
            raise ScheduleError(f"bad schedule {spec!r}: {exc}") from None
    fixed = not spec.startswith("@") and spec.split()[1] != "*"
    return Schedule(text=text, timezone=tz, trigger=trigger, fixed_hours=fixed)


_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _weekdays(field: str, spec: str) -> str:
    """Crontab's weekday field (0 or 7 = Sunday) as day names: APScheduler 3 counts from
    Monday, even in its own from_crontab, so numbers are translated here."""
    if field == "*":
        return field
    days: set[int] = set()
    for part in field.lower().split(","):
        span, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if span == "*":
                low, high = 0, 6
            else:
                first, _, last = span.partition("-")
                low = _day(first)
                high = _day(last) if last else (6 if step_text else low)
                if last and high == 0 and low > 0:
                    high = 7  # 5-7 / fri-sun: up to Sunday
        except ValueError:
            raise ScheduleError(f"bad schedule {spec!r}: weekday {part!r}") from None
        if step < 1 or low > high:
            raise ScheduleError(f"bad schedule {spec!r}: weekday {part!r}")
        days.update(d % 7 for d in range(low, high + 1, step))
    return ",".join(_DAYS[d] for d in sorted(days))


def _day(text: str) -> int:
    if text in _DAYS:
        return _DAYS.index(text)
    value = int(text)
    if not 0 <= value <= 7:
        raise ValueError(text)
    return value


def _second_occurrence(moment: datetime) -> bool:
    """A wall time in the hour that repeats when clocks go back, the second time round."""
    if not moment.fold:
        return False
    first = moment.replace(fold=0)
    return first.utcoffset() != moment.utcoffset()
