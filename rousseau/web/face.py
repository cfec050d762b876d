"""What the web face shows and acts on, gathered from the daemon's parts (no framework
imported here: the daemon builds it on the event loop)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from rousseau.approvals import ChatApprovals
    from rousseau.config import Config, WebConfig
    from rousseau.costs import Meter
    from rousseau.cron import Scheduler
    from rousseau.metrics import Metrics
    from rousseau.state.backend import Backend
    from rousseau.transports.abilities import Posts
    from rousseau.transports.base import Transport
    from rousseau.web.api import Conversations
    from rousseau.web.auth import Logins
    from rousseau.web.chat import WebChat

log = structlog.get_logger("rousseau.web")


@dataclass(kw_only=True)
class Face:
    """What the web face shows and acts on. Health alone needs the first two; the rest is
    set where `web:` is configured."""

    health: Callable[[], dict[str, dict[str, Any]]]
    """Each transport's state (the daemon's transport_states)."""
    metrics: Metrics
    config: WebConfig | None = None
    logins: Logins | None = None
    backend: Backend | None = None
    approvals: ChatApprovals | None = None
    scheduler: Scheduler | None = None
    chat: WebChat | None = None
    api: WebChat | None = None
    agents: list[str] = field(default_factory=list)
    """The agents the API offers as models (the default one first)."""
    errors: Mapping[str, str] = field(default_factory=dict)
    """Each transport's last failure (the daemon's)."""
    cron_timezone: str = "local"
    """The zone of a job added from the dashboard (the config's cron.timezone)."""
    conversations: Conversations | None = None
    """The OpenAI-compatible API's turn locks (made by `build`)."""
    background: Callable[[Callable[[], Awaitable[object]]], None] | None = None
    """Start work that outlives the request (a cron run started from the dashboard)."""
    posts: list[Posts] = field(default_factory=list)
    """The transports' posts taken at this server's address (Telegram's webhook)."""
    upload_bytes: int = 0
    """The most a web chat message's files may weigh together (the config's media.max_bytes):
    the body limit of the page that sends one."""
    profile_bounds: dict[str, int] = field(default_factory=dict)
    """Each agent's agent.memory.max_chars: an entry edited on the dashboard keeps to it."""
    meter: Meter | None = None
    """What the models cost and the budgets (the usage page)."""


def face(
    config: Config | None,
    *,
    health: Callable[[], dict[str, dict[str, Any]]],
    metrics: Metrics,
    errors: Mapping[str, str],
    transports: Mapping[str, Transport],
    approvals: ChatApprovals | None,
    scheduler: Scheduler,
    backend: Backend,
    tg: TaskGroup,
    posts: Sequence[Posts] = (),
    meter: Meter | None = None,
) -> Face:
    """Health alone (no `config`: the server of `health.listen`), or the whole web face of
    `config.web`; either with the `posts` taken at its address."""
    from rousseau.web.auth import LINKS, Logins

    shown = Face(health=health, metrics=metrics, errors=errors, posts=list(posts))
    section = config.web if config is not None else None
    if config is None or section is None:
        return shown
    shown.config = section
    shown.logins = Logins(
        password_hash=_secret(section.password_hash),
        chat_users={name: h.get_secret_value() for name, h in section.chat_users.items()},
        ttl=section.session_ttl,
        links=backend.transport_state(LINKS),
    )
    shown.backend = backend
    shown.meter = meter
    shown.approvals = approvals
    shown.scheduler = scheduler
    shown.chat = transports.get("web")  # type: ignore[assignment]
    shown.api = transports.get("api")  # type: ignore[assignment]
    named = [n for n in ("default", *config.agents) if n != config.default_agent]
    shown.agents = [config.default_agent, *named]
    shown.cron_timezone = config.cron.timezone
    shown.upload_bytes = config.media.max_bytes
    shown.profile_bounds = {
        name: config.for_agent(name).agent.memory.max_chars for name in ("default", *config.agents)
    }

    def background(work: Callable[[], Awaitable[object]]) -> None:
        async def run() -> None:
            try:
                await work()
            except Exception:
                log.exception("web.background_failed")

        tg.start_soon(run)

    shown.background = background
    return shown


def _secret(value: Any) -> str | None:
    return value.get_secret_value() if value is not None else None
