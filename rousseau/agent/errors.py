"""rousseau's error tree. Third-party exceptions are translated at the adapter boundary.

    RousseauError
    ├── AgentError
    │   ├── EmptySessionError      agent: empty session
    │   ├── ToolNotFoundError      agent: tool not found: NAME
    │   ├── MaxIterationsError     agent: max iterations exceeded
    │   └── BudgetExceededError    a spending limit is reached: no model call until it resets
    ├── ProviderError              one line: provider, HTTP status, what to check
    │   ├── ProviderAuthError        401/403: the key or its permissions
    │   ├── ProviderRateLimitError   429, after the retries the SDK made
    │   ├── ProviderUnavailableError 5xx, timeouts, connection failures
    │   └── ProviderRequestError     400/404/413: the request itself was refused
    ├── StoreError                 the SQLite store could not do what was asked
    ├── TransportError             a messaging platform failed (retried with backoff)
    │   └── TransportAuthError       the platform rejected the credentials: permanent, the
    │                                transport stops (health red) until the key is fixed
    ├── MissingExtraError          an optional SDK is not installed; names the pip extra
    └── ConfigError                names the key path (agent.max_iterations: ...)

A denied tool call is not an error: it becomes a tool result the model reads.
"""

from __future__ import annotations


class RousseauError(Exception):
    """Base of every error rousseau raises on purpose."""


class AgentError(RousseauError):
    """The agent loop could not complete a turn."""


class EmptySessionError(AgentError):
    """A turn was asked of a session with no messages."""

    def __init__(self) -> None:
        super().__init__("agent: empty session")


class ToolNotFoundError(AgentError):
    """The model called a tool that is not registered (it becomes an error result)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"agent: tool not found: {name}")
        self.name = name


class MaxIterationsError(AgentError):
    """A turn used `max_iterations` model calls without finishing."""

    def __init__(self, max_iterations: int) -> None:
        super().__init__("agent: max iterations exceeded")
        self.max_iterations = max_iterations


class BudgetExceededError(AgentError):
    """A spending limit is reached: no model is called for it until its period turns."""

    def __init__(self, limit: str, detail: str) -> None:
        super().__init__(f"budget: {detail}")
        self.limit = limit
        """The limit reached: daily_usd, monthly_usd, daily_tokens or per_sender_daily_usd."""


class ProviderError(RousseauError):
    """A model provider failed; `str()` is one line a user can act on."""

    def __init__(
        self, provider: str, message: str, *, status: int | None = None, hint: str = ""
    ) -> None:
        self.provider = provider
        self.status = status
        self.message = message
        self.hint = hint
        self.retry_after: str | None = None
        where = f"{provider}: HTTP {status}" if status else provider
        text = f"{where}: {message}"
        if hint:
            text += f" ({hint})"
        super().__init__(text)


class ProviderAuthError(ProviderError):
    """The provider refused the credentials (401) or their use of the model (403)."""


class ProviderRateLimitError(ProviderError):
    """Rate limited or out of quota (429), after the client's own retries."""


class ProviderUnavailableError(ProviderError):
    """The provider failed or could not be reached: 5xx, timeout, connection refused."""


class ProviderRequestError(ProviderError):
    """The request itself was refused (400, 404, 413, ...); retrying as-is will not help."""


class StoreError(RousseauError):
    """The session store failed or was asked for something that is not there."""


class TransportError(RousseauError, ConnectionError):
    """A platform could not be reached or refused a call; transient, so it is retried.

    Also a ConnectionError, so code that catches connection failures keeps working.
    """


class TransportAuthError(TransportError):
    """The platform rejected the credentials (or the linked session was logged out).

    Permanent: retrying cannot help, so the supervisor stops the transport and says which
    key to fix, while the other transports go on.
    """


class MissingExtraError(RousseauError, ImportError):
    """An adapter's SDK is not installed."""

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(f"{what} needs the '{extra}' extra: {install_command(extra)}")
        self.extra = extra


def install_command(extra: str) -> str:
    """The command that adds `extra` to this very installation: pip of the interpreter
    running, and for a checkout installed in place, that checkout (a package index has
    nothing to do with it)."""
    import json
    import shlex
    import sys
    from importlib import metadata
    from urllib.parse import unquote, urlsplit

    target = f"rousseau[{extra}]"
    try:
        said = metadata.distribution("rousseau").read_text("direct_url.json") or "{}"
        origin = json.loads(said)
    except (metadata.PackageNotFoundError, ValueError):
        origin = {}
    url = urlsplit(str(origin.get("url", "")))
    if url.scheme == "file" and origin.get("dir_info", {}).get("editable"):
        target = f"{unquote(url.path)}[{extra}]"
        return shlex.join([sys.executable, "-m", "pip", "install", "-e", target])
    return shlex.join([sys.executable, "-m", "pip", "install", target])


class ConfigError(RousseauError):
    """The configuration is invalid; the message names the key path."""
