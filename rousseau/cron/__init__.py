"""Persistent cron: jobs in the store, fired by the daemon's scheduler, replies through the
outbox. See DESIGN.md sections 5 and 6. The jobs' records and storage are the store's
(rousseau.state); they are named here for cron's callers."""

from rousseau.cron.jobs import CronError, CronJobs, schedule_of, target_of
from rousseau.cron.schedule import Schedule, ScheduleError, parse_schedule
from rousseau.cron.scheduler import CronRunner, RunOutcome, Scheduler
from rousseau.cron.targets import TargetError, parse_target
from rousseau.cron.tool import CronTool, describe
from rousseau.state.records import CronJob, CronRun

__all__ = [
    "CronError",
    "CronJob",
    "CronJobs",
    "CronRun",
    "CronRunner",
    "CronTool",
    "RunOutcome",
    "Schedule",
    "ScheduleError",
    "Scheduler",
    "TargetError",
    "describe",
    "parse_schedule",
    "parse_target",
    "schedule_of",
    "target_of",
]
