"""structlog set-up: text or JSON lines on stderr, with secrets masked in every event."""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterable, MutableMapping
from datetime import datetime
from typing import Any, TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
# Shapes of common credentials, masked even when they were never configured.
_TOKEN_SHAPES = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|xox[abpr]-[A-Za-z0-9\-]{10,}|xapp-[A-Za-z0-9\-]{10,}"
    r"|\b\d{6,12}:[A-Za-z0-9_\-]{30,}\b|ghp_[A-Za-z0-9]{30,}|AKIA[0-9A-Z]{16})"
)
MASK = "[REDACTED]"


class Redactor:
    """A structlog processor replacing known secret values and token shapes with a mask."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return _TOKEN_SHAPES.sub(MASK, text)

    def _clean(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {k: self._clean(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._clean(v) for v in value)
        if isinstance(value, BaseException):
            return self.redact(f"{type(value).__name__}: {value}")
        return value

    def __call__(
        self, logger: Any, method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in list(event.items()):
            event[key] = self._clean(value)
        return event


_DURATIONS = frozenset(
    {"late", "delay", "retry_in", "retry_after", "grace", "poll_interval", "duration", "lag",
     "timeout", "elapsed", "wait", "interval"}
)  # fmt: skip


def readable(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """For people reading text logs: durations as `13.1s`, epoch times as ISO local time."""
    for key, value in event.items():
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        if key in _DURATIONS:
            event[key] = duration(float(value))
        elif (key == "scheduled" or key.endswith("_at")) and value > 1e9:
            event[key] = datetime.fromtimestamp(value).astimezone().isoformat(timespec="seconds")
    return event


def duration(seconds: float) -> str:
    """`850ms`, `13.1s`, `4m05s`, `2h10m`."""
    if abs(seconds) < 1:
        return f"{seconds * 1000:.0f}ms"
    if abs(seconds) < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def configure_logging(
    level: str = "info",
    fmt: str = "text",
    secrets: Iterable[str] = (),
    file: TextIO | None = None,
) -> Redactor:
    """Route structlog to stderr (or `file`) at `level`, as text or JSON, through the
    redactor."""
    redactor = Redactor(secrets)
    renderer: Any
    extra: list[Any] = []
    if fmt == "json":  # for machines: numbers stay numbers
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=file is None and sys.stderr.isatty())
        extra = [readable]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            redactor,
            *extra,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=file or sys.stderr),
        cache_logger_on_first_use=False,
    )
    _route_libraries(level, file, [redactor, *extra, renderer])
    return redactor


def _route_libraries(level: str, file: TextIO | None, last: list[Any]) -> None:
    """What the vendor SDKs log through the standard library (warnings and errors; at debug,
    their info too: their own debug is a trace of every frame and socket) is written as the
    daemon's own events are: timestamped, in the same format, secrets masked. Left alone it
    went to stderr raw, unmasked, without a time."""
    handler = logging.StreamHandler(file or sys.stderr)
    handler.set_name(_LIBRARIES)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                structlog.stdlib.add_logger_name,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
            ],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                *last,
            ],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _LIBRARIES]:
        root.removeHandler(old)
    root.addHandler(handler)
    given = _LEVELS.get(level, logging.INFO)
    root.setLevel(logging.INFO if level == "debug" else max(logging.WARNING, given))


_LIBRARIES = "rousseau.libraries"
