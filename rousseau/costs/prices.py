"""What models cost: a table of list prices (USD per million tokens) that `prices:` in the
config extends or overrides, and the cost of one call's usage.

The table holds the list prices of the models people run most, as Anthropic, OpenAI and
OpenRouter published them in late 2026. A model is looked up by its name as configured,
then without a vendor prefix (`anthropic/claude-sonnet-4.5`, OpenRouter's form) and without
a date suffix (`claude-3-5-haiku-20241022`), dots and dashes alike; a model found nowhere
costs nothing, said once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

from rousseau.agent import Usage

log = structlog.get_logger("rousseau.costs")


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float

    @classmethod
    def of(
        cls,
        input: float,
        output: float,
        cache_read: float | None = None,
        cache_write: float | None = None,
    ) -> Price:
        """A price; the cache's, where not given, as the vendors mostly charge it: a read a
        tenth of input, a write a quarter more than input."""
        return cls(
            input=input,
            output=output,
            cache_read=input / 10 if cache_read is None else cache_read,
            cache_write=input * 1.25 if cache_write is None else cache_write,
        )

    def cost(self, usage: Usage) -> float:
        """What `usage` costs, in USD."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


FREE = Price(0.0, 0.0, 0.0, 0.0)
LOCAL = frozenset({"ollama"})
"""Providers whose models run on the user's own machine: free, with no warning."""

# input, output, cache read, cache write (None: as Price.of works them out)
_LISTED: dict[str, tuple[float, float, float | None, float | None]] = {
    # Anthropic (cache writes: the 5-minute cache)
    "claude-opus-4-5": (5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-1": (15.0, 75.0, 1.50, 18.75),
    "claude-opus-4": (15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-4-5": (3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4": (3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": (3.0, 15.0, 0.30, 3.75),
    "claude-3-5-sonnet": (3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4-5": (1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": (0.80, 4.0, 0.08, 1.0),
    "claude-3-haiku": (0.25, 1.25, 0.03, 0.30),
    # OpenAI (cached input is read from the cache; writing to it costs nothing extra)
    "gpt-5": (1.25, 10.0, 0.125, 0.0),
    "gpt-5-mini": (0.25, 2.0, 0.025, 0.0),
    "gpt-5-nano": (0.05, 0.40, 0.005, 0.0),
    "gpt-4-1": (2.0, 8.0, 0.50, 0.0),
    "gpt-4-1-mini": (0.40, 1.60, 0.10, 0.0),
    "gpt-4-1-nano": (0.10, 0.40, 0.025, 0.0),
    "gpt-4o": (2.50, 10.0, 1.25, 0.0),
    "gpt-4o-mini": (0.15, 0.60, 0.075, 0.0),
    "o3": (2.0, 8.0, 0.50, 0.0),
    "o4-mini": (1.10, 4.40, 0.275, 0.0),
    "o3-mini": (1.10, 4.40, 0.55, 0.0),
    # Others OpenRouter lists at these prices
    "gemini-2-5-pro": (1.25, 10.0, 0.31, 0.0),
    "gemini-2-5-flash": (0.30, 2.50, 0.075, 0.0),
    "deepseek-chat": (0.27, 1.10, 0.07, 0.0),
    "deepseek-r1": (0.55, 2.19, 0.14, 0.0),
}
DEFAULT_PRICES: Mapping[str, Price] = {name: Price.of(*listed) for name, listed in _LISTED.items()}

_DATED = re.compile(r"-(\d{8}|\d{4}-\d{2}-\d{2}|latest)$")


def normal(model: str) -> str:
    """A model's name as the table keys it: lower case, dots as dashes."""
    return model.strip().lower().replace(".", "-").replace("_", "-")


_TRIMS = (
    lambda n: n.rsplit("/", 1)[-1],  # openrouter's vendor/model
    lambda n: n.split(":", 1)[0],  # bedrock's …-v1:0, ollama's tags
    lambda n: n.split("@", 1)[0],  # vertex's model@date
    lambda n: re.sub(r"^((us|eu|apac|global)-)?anthropic-", "", n),  # bedrock's prefixes
    lambda n: re.sub(r"-v\d+$", "", n),
    lambda n: _DATED.sub("", n),
)


def _candidates(model: str) -> list[str]:
    """The names a model may be listed under, the most precise first."""
    names = [normal(model)]
    for trim in _TRIMS:
        names.append(trim(names[-1]))
    return list(dict.fromkeys(names))


class Prices:
    """The built-in table with the configured prices over it; `of(model)` finds a model's."""

    def __init__(self, configured: Mapping[str, Price] | None = None) -> None:
        self._table = {**DEFAULT_PRICES, **{normal(k): v for k, v in (configured or {}).items()}}
        self._found: dict[str, Price] = {}
        self.unknown: set[str] = set()
        """Models costed as zero (each warned about once)."""

    def knows(self, model: str, provider: str = "") -> bool:
        """Whether the model has a price (a local provider's are free), said of no one."""
        if provider in LOCAL:
            return True
        return any(name in self._table for name in _candidates(model))

    def of(self, model: str) -> Price:
        found = self._found.get(model)
        if found is not None:
            return found
        for name in _candidates(model):
            if name in self._table:
                found = self._table[name]
                break
        else:
            found = FREE
            self.unknown.add(model)
            log.warning(
                "costs.unknown_model",
                model=model,
                hint="its calls are costed as zero: give its price under prices:",
            )
        if len(self._found) < 1024:
            self._found[model] = found
        return found

    def cost(self, model: str, usage: Usage, provider: str = "") -> float:
        if provider in LOCAL and normal(model) not in self._table:
            return 0.0
        return self.of(model).cost(usage)
