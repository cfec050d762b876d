"""`rousseau import-go PATH`: sessions, messages and cron jobs from a rousseau-agent database.

The store copies the sessions and reads the jobs (state/import_go.py); here each job's Go
schedule and bare recipient become rousseau's, and the job is added through cron's checks,
exactly as `rousseau cron add` adds one. Jobs keep their names, so a second run finds them in
place and adds nothing new.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import TYPE_CHECKING

from rousseau.cli.common import load, with_state
from rousseau.cron.jobs import CronError, CronJobs
from rousseau.cron.targets import TargetError, parse_target
from rousseau.state.import_go import GoImport, import_go_sessions

if TYPE_CHECKING:
    from rousseau.state import SessionStore
    from rousseau.state.protocol import JobStore

SHOWN_SKIPS = 20
"""Lines of "left out" printed before the rest are only counted."""
_WHATSAPP_SERVERS = ("s.whatsapp.net", "g.us", "lid")
_IMESSAGE_GUID = re.compile(r"^(iMessage|SMS|any);[-+];\S+$")
_SLACK_ID = re.compile(r"^[CDGU][A-Z0-9]{2,}$")
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def import_go(args: argparse.Namespace) -> int:
    from rousseau.agent import StoreError

    config = load(args)
    source = Path(args.path).expanduser()
    own = Path(config.state.path).expanduser()
    if config.state.url is None and source.exists() and own.exists() and source.samefile(own):
        # Opening it as rousseau's store would fail on rousseau-agent's tables; say what to do.
        raise StoreError(
            f"{source} is also state.path, where rousseau keeps its own store; move it aside "
            f"(e.g. mv {source} {source.with_name('rousseau-agent.db')}) and import the moved file"
        )
    result = with_state(
        config,
        lambda backend: import_file(
            source, backend.store, backend.jobs, timezone=config.cron.timezone
        ),
    )
    for line in report(result, str(source)):
        print(line)
    return 0


async def import_file(
    path: str | Path, store: SessionStore, jobs: JobStore, *, timezone: str = "local"
) -> GoImport:
    """Copy the sessions, messages and cron jobs of the rousseau-agent database at `path`.

    `timezone` is the zone of imported schedules without CRON_TZ= (rousseau-agent used the
    machine's). Raises StoreError when the file is missing or is not a rousseau-agent
    database."""
    result = await import_go_sessions(path, store)
    if result.jobs:
        await _add_jobs(CronJobs(jobs), result, timezone)
    return result


async def _add_jobs(jobs: CronJobs, result: GoImport, timezone: str) -> None:
    existing = {job.name: job for job in await jobs.all()}
    for go in result.jobs:
        name = go.name
        target, why = go_target(go.recipient)
        if target is None:
            result.skipped.append(f"cron job {name!r}: {why}")
            continue
        schedule = go_schedule(go.expr)
        found = existing.get(name)
        if found is not None:
            if (found.schedule, found.prompt, found.deliver_to) == (schedule, go.prompt, target):
                result.cron_present += 1
            else:
                result.skipped.append(f"cron job {name!r}: another job has that name here")
            continue
        try:
            added = await jobs.add(
                name, schedule, go.prompt, target, timezone=timezone, enabled=go.enabled
            )
        except CronError as exc:
            result.skipped.append(f"cron job {name!r}: {exc}")
            continue
        existing[added.name] = added
        result.cron_jobs += 1


def go_target(recipient: str) -> tuple[str | None, str]:
    """A rousseau-agent job's bare recipient as `transport:recipient`, or None and why not.

    A WhatsApp JID keeps its server (the chat id rousseau's transport sends to) without the
    device suffix; other shapes are placed only where just one transport uses them."""
    text = recipient.strip()
    if not text:
        return None, "it has no delivery target"
    user, at, server = text.partition("@")
    if at and server in _WHATSAPP_SERVERS:
        target = f"whatsapp:{user.split(':')[0]}@{server}"
    elif text.startswith("!") or (text.startswith("@") and ":" in text):
        target = f"matrix:{text}"
    elif _IMESSAGE_GUID.match(text):
        target = f"imessage:{text}"
    elif text.startswith("group:"):
        target = f"signal:{text}"
    elif at:
        target = f"email:{text}"
    elif _SLACK_ID.match(text):
        target = f"slack:{text}"
    else:
        try:
            parse_target(text)
        except TargetError:
            return None, (
                f"{text!r} could be on more than one transport; add the job again with "
                f"rousseau cron add --deliver-to TRANSPORT:{text}"
            )
        return text, ""
    try:
        parse_target(target)
    except TargetError as exc:
        return None, str(exc)
    return target, ""


def go_schedule(expr: str) -> str:
    """A robfig/cron expression in rousseau's schedule syntax: `TZ=` becomes `CRON_TZ=` and an
    `@every` Go duration whole seconds (as robfig/cron rounds it). Anything else is kept."""
    text = " ".join(expr.split())
    if text.startswith("TZ="):
        text = "CRON_" + text
    zone, spec = ("", text)
    if text.startswith("CRON_TZ="):
        zone, _, spec = text.partition(" ")
    if spec.startswith("@every "):
        every = _every(spec.removeprefix("@every "))
        if every is not None:
            spec = f"@every {every}"
    return f"{zone} {spec}" if zone else spec


def _every(duration: str) -> str | None:
    parts = _GO_DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        return None
    seconds = max(1, int(sum(float(n) * _GO_UNITS[u] for n, u in parts)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((hours, "h"), (minutes, "m"), (secs, "s")) if v)


def report(result: GoImport, source: str) -> list[str]:
    """What was imported, what was already here and what was left out, in a few lines."""
    new = result.sessions or result.cron_jobs
    lines = [f"imported from {source}:" if new else f"nothing new to import from {source}"]
    if new:
        lines.append(
            f"  {_count(result.sessions, 'session')} ({_count(result.messages, 'message')},"
            f" {_count(result.tool_calls, 'tool call')})"
        )
        if result.chats:
            lines.append(
                f"  {_count(result.chats, 'WhatsApp chat')} will continue where it left off"
            )
        lines.append(f"  {_count(result.cron_jobs, 'cron job')} (see: rousseau cron list)")
    if result.sessions_present or result.cron_present:
        lines.append(
            f"already here: {_count(result.sessions_present, 'session')},"
            f" {_count(result.cron_present, 'cron job')}"
        )
    if result.empty_sessions:
        lines.append(f"left out {_count(result.empty_sessions, 'empty session')}")
    if result.skipped:
        lines.append("left out, or copied in part:")
        lines += [f"  {why}" for why in result.skipped[:SHOWN_SKIPS]]
        if len(result.skipped) > SHOWN_SKIPS:
            lines.append(f"  ... and {len(result.skipped) - SHOWN_SKIPS} more")
    return lines


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
