"""`rousseau cron`: scheduled prompts delivered to a chat."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from rousseau.cli.common import close_provider, fail, load, on_state

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.state.backend import Backend


def add(args: argparse.Namespace) -> int:
    from rousseau.cron import CronJobs, describe

    config = load(args)
    transport = args.deliver_to.partition(":")[0]
    if (why := config.unknown_agent(args.agent)) is not None:
        fail(f"--agent: {why}")
        return 2
    job = on_state(
        args,
        lambda backend: CronJobs(backend.jobs).add(
            args.name,
            args.schedule,
            args.prompt,
            args.deliver_to,
            timezone=config.cron.timezone,
            misfire=args.misfire,
            enabled=not args.disabled,
            agent=args.agent,
        ),
        config,
    )
    print(f"added {describe(job)}")
    if getattr(config, transport, None) is None:
        print(f"note: {transport} is not configured yet; replies wait until it is", file=sys.stderr)
    return 0


def list_jobs(args: argparse.Namespace) -> int:
    from rousseau.cron import describe

    jobs = on_state(args, lambda backend: backend.jobs.all())
    if not jobs:
        print("no cron jobs (add one: rousseau cron add --help)")
    for job in jobs:
        print(describe(job))
    return 0


def one(args: argparse.Namespace) -> int:
    from rousseau.cron import CronJobs, describe

    config = load(args)

    async def act(backend: Backend) -> int:
        jobs = CronJobs(backend.jobs)
        if args.verb == "remove":
            print(f"removed {(await jobs.remove(args.job)).name}")
        elif args.verb in ("enable", "disable"):
            print(describe(await jobs.set_enabled(args.job, args.verb == "enable")))
        else:
            return await _cron_run(config, backend, await jobs.get(args.job))
        return 0

    return on_state(args, act, config)


async def _cron_run(config: Config, backend: Backend, job: Any) -> int:
    """Run the turn here; a running daemon (or the next one) delivers the reply."""
    from rousseau.assembly import agent_config, build_agent
    from rousseau.assembly.models import agent_models, build_meter
    from rousseau.cron import CronRunner, Scheduler
    from rousseau.policy import chat_policies as policies
    from rousseau.providers import build_provider, detect_provider
    from rousseau.router import RateLimiter, Router

    name, _why = detect_provider(config)
    if (why := config.unknown_agent(job.agent)) is not None:
        fail(f"cron job {job.name} cannot run: {why}")
        return 1
    whole = config
    config, name = agent_config(config, job.agent, name)
    store = backend.store
    provider = build_provider(config, name, store=store)
    meter = None
    if backend.spending is not None:  # its calls are costed and budgeted as the daemon's
        meter = build_meter(whole, backend.spending, told=backend.transport_state("costs"))
    made: list[Any] = []
    models = agent_models(config, provider, name, agent=job.agent, meter=meter, made=made)
    agent = build_agent(
        config,
        models.cron,
        store,
        name=job.agent,
        profiles=backend.profiles,
        compaction=models.compaction,
    )
    try:
        transports = _target_transport(config, job.deliver_to.partition(":")[0])
        router = Router(
            agent=agent,
            store=store,
            daemon_state=backend.state,
            transport_state=backend.transport_state,
            transports=transports,
            policies=policies(config),  # their reply headers
            rate_limiter=RateLimiter((1, 1.0), {}, 1),
            meter=meter,
        )
        if meter is not None:
            meter.notify = router.notify
        runner = CronRunner(
            agent=agent,
            store=store,
            notify=router.notify,
            timeout=config.cron.timeout,
            notify_failures=config.cron.notify_failures,
        )
        outcome = await Scheduler(jobs=backend.jobs, runner=runner).run_now(job)
    finally:
        for one in [provider, *made]:
            await close_provider(one)
    if outcome.status != "ok":
        fail(f"cron job {job.name} failed: {outcome.error}")
        return 1
    print(outcome.text)
    print(f"(queued for {job.deliver_to}; a running daemon delivers it)", file=sys.stderr)
    return 0


def _target_transport(config: Config, name: str) -> dict[str, Any]:
    """The target's transport, for its length limit when splitting (none if unavailable)."""
    from rousseau.agent import RousseauError
    from rousseau.transports import build_transports

    if getattr(config, name, None) is None:
        return {}
    try:
        return build_transports(config, only=name)
    except RousseauError:
        return {}
