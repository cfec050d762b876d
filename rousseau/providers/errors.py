"""One clear line for every way a provider call can fail."""

from __future__ import annotations

from rousseau.agent import ProviderError

_HINTS = {
    400: "the provider rejected the request",
    401: "check {section}.api_key{env}",
    403: "the key is not allowed to use this model; check {section}.api_key and {section}.model",
    404: "check {section}.model ({model}) and {section}.base_url",
    408: "the request timed out; try again",
    413: "the conversation is too large; start a new session",
    429: "rate limited or out of quota; wait and try again",
}


def status_error(
    provider: str, status: int, message: str, *, section: str, model: str, env: str = ""
) -> ProviderError:
    """Translate an HTTP error status into a ProviderError with what to check."""
    hint = _HINTS.get(status)
    if hint is None:
        hint = "the provider failed; try again later" if status >= 500 else ""
    env_part = f" or {env}" if env else ""
    return ProviderError(
        provider,
        _first_line(message) or f"request failed with status {status}",
        status=status,
        hint=hint.format(section=section, model=model, env=env_part),
    )


def connection_error(provider: str, base_url: str, *, section: str, timeout: bool) -> ProviderError:
    what = "timed out talking to" if timeout else "cannot connect to"
    return ProviderError(
        provider, f"{what} {base_url}", hint=f"check {section}.base_url and the network"
    )


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 300 else line[:297] + "..."


def error_message(body: object, fallback: str) -> str:
    """The human part of an error body: {"error": {"message": ...}} or {"message": ...}."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return fallback
