"""Intake's failures: a message that keeps making intake fail (not for want of disk) is
recorded as failed and skipped, so it cannot block the ones behind it on its platform."""

from __future__ import annotations

from collections import OrderedDict

import structlog

from rousseau.messages import Inbound
from rousseau.metrics import Metrics

log = structlog.get_logger("rousseau.router")

MAX_ATTEMPTS = 3
"""Tries of one message that keeps failing, at intake or in its turn (not for want of disk),
before it is given up."""
KEPT = 1000
"""Messages whose failed intakes are counted (the least recently failed dropped first)."""


class IntakeFailures:
    """The count of each message's failed intakes, LRU-bounded."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._failures: OrderedDict[tuple[str, str], int] = OrderedDict()

    def given_up(self, inbound: Inbound, exc: Exception) -> bool:
        """Count a failed intake; True once this message has failed too often to retry."""
        key = (inbound.transport, inbound.message_id)
        failures = self._failures.pop(key, 0) + 1
        self._failures[key] = failures
        while len(self._failures) > KEPT:
            self._failures.popitem(last=False)
        self._metrics.retries.labels("intake").inc()
        if failures < MAX_ATTEMPTS:
            log.warning("router.intake_failed", attempt=failures, exc_info=exc)
            return False
        log.error(
            "router.intake_gave_up",
            transport=inbound.transport,
            message=inbound.message_id,
            exc_info=exc,
        )
        self._metrics.failed_inbound.labels(inbound.transport).inc()
        return True
