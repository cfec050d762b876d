"""The `cron` tool: the model lists, adds and removes scheduled prompts for the user, who
asked in chat ("remind me every Monday at 9 to send the report"). Like any tool, each call
goes through the approver first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar

from rousseau.agent import ToolCall, ToolOutput
from rousseau.cron.jobs import CronError, CronJobs, schedule_of
from rousseau.messages import DEFAULT_AGENT, current_inbound
from rousseau.state.protocol import JobStore
from rousseau.state.records import CronJob
from rousseau.tools import Tool


def describe(job: CronJob) -> str:
    """One line: name, schedule, next run in the job's time zone, last status, target."""
    if not job.enabled:
        upcoming = "disabled"
    elif job.next_run_at is None:
        upcoming = "never again"
    else:
        zone = schedule_of(job).timezone
        upcoming = datetime.fromtimestamp(job.next_run_at, zone).strftime("%Y-%m-%d %H:%M %Z")
    return (
        f"{job.name}  [{job.schedule}]  next: {upcoming}  last: {job.last_status or '-'}"
        f"  -> {job.deliver_to}" + (f"  (agent {job.agent})" if job.agent != DEFAULT_AGENT else "")
    )


class CronTool(Tool):
    name: ClassVar[str] = "cron"
    description: ClassVar[str] = (
        "Scheduled prompts: each runs as a fresh agent turn at its times and the reply is sent "
        "to a chat. action=list shows the jobs; action=add needs name, schedule (5-field cron "
        "such as '0 9 * * 1', @hourly/@daily/@weekly/@monthly, '@every 90s|5m|1h30m', "
        "optionally prefixed 'CRON_TZ=Europe/Paris ') and prompt (what to do at that time, "
        "written as an instruction to yourself); deliver_to defaults to the current chat. "
        "action=remove needs name."
    )
    input_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"enum": ["list", "add", "remove"]},
            "name": {"type": "string", "minLength": 1, "maxLength": 100},
            "schedule": {"type": "string", "minLength": 1, "maxLength": 200},
            "prompt": {"type": "string", "minLength": 1, "maxLength": 8000},
            "deliver_to": {
                "type": "string",
                "description": "TRANSPORT:RECIPIENT such as telegram:42; default: this chat",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
        "allOf": [
            {
                "if": {"properties": {"action": {"const": "add"}}},
                "then": {"required": ["name", "schedule", "prompt"]},
            },
            {
                "if": {"properties": {"action": {"const": "remove"}}},
                "then": {"required": ["name"]},
            },
        ],
    }

    def __init__(
        self,
        jobs: JobStore,
        *,
        timezone: str = "local",
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.jobs = CronJobs(jobs)
        self.timezone = timezone
        self.on_change = on_change
        """Called after a change (the daemon wakes its scheduler)."""

    async def execute(self, input: dict[str, Any], call: ToolCall) -> ToolOutput:
        try:
            if input["action"] == "list":
                jobs = await self.jobs.all()
                return ToolOutput(content="\n".join(describe(j) for j in jobs) or "no cron jobs")
            if input["action"] == "remove":
                job = await self.jobs.remove(input["name"])
                self._changed()
                return ToolOutput(content=f"removed {job.name}")
            target = input.get("deliver_to") or _this_chat()
            if target is None:
                return ToolOutput(
                    content="deliver_to is needed here (this is not a chat)", is_error=True
                )
            job = await self.jobs.add(
                input["name"], input["schedule"], input["prompt"], target, timezone=self.timezone
            )
        except CronError as exc:
            return ToolOutput(content=str(exc), is_error=True)
        self._changed()
        return ToolOutput(content=f"added {describe(job)}")

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


def _this_chat() -> str | None:
    inbound = current_inbound.get()
    return f"{inbound.transport}:{inbound.chat_id}" if inbound is not None else None
