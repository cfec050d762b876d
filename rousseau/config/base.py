"""What every section is made of: the `Section` base (unknown keys are errors) and the value
types its keys share: durations, rates, sender ids, policies, provider names.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")


def parse_duration(value: Any) -> float:
    """`90s`, `5m`, `1h30m`, `250ms`, `30d` or plain seconds, as seconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 90s, 5m or 1h30m")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if not text or "".join(n + u for n, u in parts) != text:
                raise ValueError(
                    f"{value!r} is not a duration (use 90s, 5m, 1h30m or seconds)"
                ) from None
            scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
            seconds = sum(float(n) * scale[u] for n, u in parts)
    else:
        raise ValueError("expected a duration such as 90s, 5m or 1h30m")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_rate(value: str) -> tuple[int, float]:
    """`20/1m` (or `20/m`) as (20, 60.0): so many per so many seconds."""
    count, sep, period = value.partition("/")
    if not sep or not count.strip().isdigit() or int(count) < 1:
        raise ValueError(f"{value!r} is not a rate (use COUNT/PERIOD, e.g. 20/1m)")
    return int(count), parse_duration(period if period[:1].isdigit() else f"1{period}")


def _check_rate(value: str) -> str:
    parse_rate(value)
    return value


Duration = Annotated[float, BeforeValidator(parse_duration)]
Rate = Annotated[str, AfterValidator(_check_rate)]
SenderId = Annotated[str, BeforeValidator(lambda v: str(v) if isinstance(v, int) else v)]
Policy = Literal["allowlist", "pairing", "open"]
BUILTIN_PROVIDERS = (
    "anthropic",
    "openai",
    "openrouter",
    "ollama",
    "bedrock",
    "vertex",
    "claudecli",
)


def _provider(value: str) -> str:
    """A built-in provider, or one an installed plugin adds (looked for only then)."""
    if value in BUILTIN_PROVIDERS:
        return value
    from rousseau.plugins import installed

    plugin = installed().get(value)
    if plugin is None or plugin.kind != "provider":
        known = ", ".join(repr(p) for p in BUILTIN_PROVIDERS)
        raise ValueError(f"Input should be {known} or an installed provider plugin's name")
    return value


ProviderName = Annotated[str, AfterValidator(_provider)]


class Section(BaseModel):
    # The string under each field documents it (docgen reads those from the source: having
    # pydantic read them too, at every start, would cost a fifth of the config's import).
    # defer_build: Config's validator, built at the first load, holds every section's; each
    # section compiling its own as well at import cost start-up time and memory for nothing.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)
