"""Prometheus metrics for the daemon, in a registry of their own (one per daemon)."""

from __future__ import annotations

import time

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from rousseau.agent import Usage


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.inbound = Counter(
            "rousseau_inbound_messages", "Messages received", ["transport"], registry=r
        )
        self.replies = Counter(
            "rousseau_replies_sent", "Reply parts delivered", ["transport"], registry=r
        )
        self.errors = Counter(
            "rousseau_turn_errors", "Turns that failed", ["transport"], registry=r
        )
        self.turn_seconds = Histogram(
            "rousseau_turn_seconds",
            "Time to answer a message, model and tools included",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.queue_depth = Gauge(
            "rousseau_queue_depth", "Messages waiting for their session's turn", registry=r
        )
        self.outbox_pending = Gauge(
            "rousseau_outbox_pending", "Reply parts not yet delivered", ["transport"], registry=r
        )
        self.retries = Counter(
            "rousseau_retries",
            "Work retried after a failure, by stage (turn, intake)",
            ["stage"],
            registry=r,
        )
        self.failed_inbound = Counter(
            "rousseau_failed_inbound",
            "Messages given up on after repeated failures (recorded with their traceback),"
            " or refused by their transport as unreadable (logged with the reason)",
            ["transport"],
            registry=r,
        )
        self.pruned = Counter(
            "rousseau_pruned_rows", "Rows deleted by the retention sweep", ["table"], registry=r
        )
        self.loop_lag = Gauge(
            "rousseau_event_loop_lag_seconds",
            "The longest the event loop was late to wake a task, since the last scrape",
            registry=r,
        )
        self.provider_tokens = Counter(
            "rousseau_provider_tokens", "Tokens used, by kind", ["kind"], registry=r
        )
        self.cost_usd = Counter(
            "rousseau_cost_usd",
            "What model calls cost, in USD (by the price table), by agent",
            ["agent"],
            registry=r,
        )
        self.budget_refusals = Counter(
            "rousseau_budget_refusals",
            "Model calls not made because a spending limit was reached, by agent and limit",
            ["agent", "limit"],
            registry=r,
        )
        self.memory_flushes = Counter(
            "rousseau_memory_flushes",
            "Flushes before a compaction, by outcome: saved (profile entries written), nothing"
            " (the model kept nothing), failed (the request failed), skipped (no person)",
            ["outcome"],
            registry=r,
        )

    def tokens(self, usage: Usage) -> None:
        for kind, value in (
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ):
            if value:
                self.provider_tokens.labels(kind).inc(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class LagProbe:
    """Measures how late the event loop wakes a sleeping task: anything that blocks the loop
    (a synchronous call, a slow callback) shows up as lag.

    Looking `every` quarter second, it measures in full any block longer than that, and
    catches shorter ones in proportion to their length; looking more often would wake an
    idle daemon many times a second (forty, at 25 ms: a core that never rests)."""

    def __init__(self, metrics: Metrics, every: float = 0.25, window: float = 10.0) -> None:
        self.metrics = metrics
        self.every = every
        self.window = window
        self.worst = 0.0
        """The worst lag since the probe started, in seconds."""

    async def run(self) -> None:
        recent, since = 0.0, time.monotonic()
        while True:
            before = time.monotonic()
            await anyio.sleep(self.every)
            now = time.monotonic()
            late = max(0.0, now - before - self.every)
            self.worst = max(self.worst, late)
            if now - since > self.window:
                recent, since = 0.0, now
            recent = max(recent, late)
            self.metrics.loop_lag.set(recent)
