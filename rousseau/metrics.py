"""Prometheus metrics for the daemon, in a registry of their own (one per daemon)."""

from __future__ import annotations

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
            "rousseau_outbox_pending", "Reply parts not yet delivered", registry=r
        )
        self.provider_tokens = Counter(
            "rousseau_provider_tokens", "Tokens used, by kind", ["kind"], registry=r
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
