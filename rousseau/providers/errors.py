"""One clear line for every way a provider call can fail, in one ProviderError family."""

from __future__ import annotations

from rousseau.agent import (
    ProviderAuthError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderUnavailableError,
)

_HINTS = {
    400: "the provider rejected the request",
    403: "the credentials may not use this model; check {section}.model",
    404: "check {section}.model ({model}) and {section}.base_url",
    408: "the request timed out; try again",
    413: "the conversation is too large; start a new session with /new",
    429: "rate limited or out of quota; wait and try again",
}


def status_error(
    provider: str,
    status: int,
    message: str,
    *,
    model: str,
    key_hint: str,
    section: str,
    retry_after: str | None = None,
) -> ProviderError:
    """Translate an HTTP error status into the matching ProviderError, with what to check."""
    if status == 401:
        hint = key_hint
    elif status in _HINTS:
        hint = _HINTS[status].format(section=section, model=model)
    else:
        hint = "the provider failed; try again later" if status >= 500 else ""
    cls: type[ProviderError]
    if status in (401, 403):
        cls = ProviderAuthError
    elif status == 429:
        cls = ProviderRateLimitError
    elif status >= 500 or status in (408, 409):
        cls = ProviderUnavailableError
    else:
        cls = ProviderRequestError
    error = cls(
        provider,
        _first_line(message) or f"request failed with status {status}",
        status=status,
        hint=hint,
    )
    error.retry_after = retry_after
    return error


def connection_error(provider: str, base_url: str, *, section: str, timeout: bool) -> ProviderError:
    what = "timed out talking to" if timeout else "cannot connect to"
    return ProviderUnavailableError(
        provider, f"{what} {base_url}", hint=f"check {section}.base_url and the network"
    )


def error_message(body: object, fallback: str) -> str:
    """The human part of an error body: {"error": {"message": ...}} or {"message": ...}."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return fallback


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 300 else line[:297] + "..."
