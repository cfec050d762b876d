"""Keys of a config.yaml written for rousseau-agent, the Go daemon rousseau grew from.

Such a file loads: each key or form that exists only there is read as its rousseau equivalent
where there is one, or dropped, and either way leaves one notice saying what rousseau does
instead. Every other unknown key stays an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from rousseau.config import (
    AnthropicConfig,
    BedrockConfig,
    CompressionConfig,
    OllamaConfig,
    OpenAIConfig,
    OpenRouterConfig,
    RateLimitConfig,
    VertexConfig,
)

# "10r/1m": so many requests per period, the "r" optional (rousseau writes 10/1m).
_GO_RATE = re.compile(r"^\s*(\d+)\s*r\s*/\s*(\S+)\s*$")
_PROVIDERS: dict[str, type[BaseModel]] = {
    "anthropic": AnthropicConfig,
    "openai": OpenAIConfig,
    "openrouter": OpenRouterConfig,
    "ollama": OllamaConfig,
    "bedrock": BedrockConfig,
    "vertex": VertexConfig,
}


@dataclass(kw_only=True, slots=True)
class GoKeys:
    """What reading a rousseau-agent config changed."""

    notices: dict[str, str] = field(default_factory=dict)
    """Key path -> what rousseau does instead; one per key."""
    moved: dict[tuple[str, ...], str] = field(default_factory=dict)
    """A rousseau key path -> the rousseau-agent key its value came from (for errors)."""


def translate_go_keys(data: dict[str, Any]) -> GoKeys:
    """Rewrite the raw config mapping in place so rousseau-agent keys validate."""
    found = GoKeys()
    _recall(data, found)
    _observability(data, found)
    if "resilience" in data:
        data.pop("resilience")
        found.notices["resilience"] = (
            "rousseau has no circuit breaker; a failing provider is retried with backoff "
            "(max_retries in its section), then the providers in fallback are tried"
        )
    if "integrations" in data:
        data.pop("integrations")
        found.notices["integrations"] = (
            "rousseau has no built-in GitHub, Slack, Google, Linear, Stripe or Composio tools; "
            "connect their MCP servers under mcp_servers instead"
        )
    whatsapp = _mapping(data, "whatsapp")
    if whatsapp is not None and "voice" in whatsapp:
        whatsapp.pop("voice")
        found.notices["whatsapp.voice"] = (
            "rousseau does not transcribe voice notes; messages without text are ignored"
        )
    imessage = _mapping(data, "imessage")
    if imessage is not None and "chat_guid" in imessage:
        guid = imessage.pop("chat_guid")
        where = f"imessage:{guid}" if isinstance(guid, str) and guid else "imessage:CHAT_GUID"
        found.notices["imessage.chat_guid"] = (
            "rousseau answers in the chat each message came from; to send scheduled results "
            f"to a chat, give the job --deliver-to {where}"
        )
    _ratelimit(data, found)
    _zero_means_default(data, found)
    return found


def _mapping(node: Any, key: str) -> dict[str, Any] | None:
    child = node.get(key) if isinstance(node, dict) else None
    return child if isinstance(child, dict) else None


def _is_zero(value: Any) -> bool:
    return not isinstance(value, bool) and value in (0, "0")


def _recall(data: dict[str, Any], found: GoKeys) -> None:
    if "recall" not in data:
        return
    go = data.pop("recall")
    note = (
        "rousseau has no vector recall: earlier sessions are found by full-text search "
        "(agent.recall), so embedder, chunk, hybrid and purge settings are ignored"
    )
    k = go.get("retrieval_k") if isinstance(go, dict) else None
    if isinstance(k, int) and not isinstance(k, bool) and k > 0:
        agent = data.setdefault("agent", {})
        recall = agent.setdefault("recall", {}) if isinstance(agent, dict) else None
        if isinstance(recall, dict) and "top_k" not in recall:
            recall["top_k"] = k
            found.moved[("agent", "recall", "top_k")] = "recall.retrieval_k"
            note += f"; retrieval_k is read as agent.recall.top_k ({k})"
    found.notices["recall"] = note


def _observability(data: dict[str, Any], found: GoKeys) -> None:
    if "observability" not in data:
        return
    go = data.pop("observability")
    go = go if isinstance(go, dict) else {}
    notes = []
    addr = go.get("metrics_addr")
    if isinstance(addr, str) and addr:
        listen = f"127.0.0.1{addr}" if addr.startswith(":") else addr
        if data.get("health") is None:
            data["health"] = {"listen": listen}
            found.moved[("health",)] = "observability.metrics_addr"
            notes.append(
                f"metrics_addr is read as health.listen ({listen}), which serves /metrics "
                "and /healthz"
            )
        else:
            notes.append("metrics_addr is ignored: health.listen serves /metrics")
    else:
        notes.append("/metrics is served on health.listen when health is set")
    if go.get("otlp_endpoint"):
        notes.append("rousseau exports no OpenTelemetry traces, so otlp_endpoint is ignored")
    found.notices["observability"] = "; ".join(notes)


def _ratelimit(data: dict[str, Any], found: GoKeys) -> None:
    section = _mapping(data, "ratelimit")
    if section is None:
        return
    default_rate = RateLimitConfig.model_fields["default"].default
    if section.get("default") == "":
        section.pop("default")
        found.notices["ratelimit.default"] = (
            f"empty meant no limit in rousseau-agent; rousseau applies {default_rate}"
        )
    _rate(section, "default", "ratelimit.default", found)
    per_transport = _mapping(section, "per_transport") or {}
    for name in list(per_transport):
        if per_transport[name] == "":
            per_transport.pop(name)
            found.notices[f"ratelimit.per_transport.{name}"] = (
                f"empty meant the default rate; rousseau applies ratelimit.default to {name}"
            )
        else:
            _rate(per_transport, name, f"ratelimit.per_transport.{name}", found)
    if _is_zero(section.get("max_keys")):
        section.pop("max_keys")
        keys = RateLimitConfig.model_fields["max_keys"].default
        found.notices["ratelimit.max_keys"] = f"0 means the default, {keys}"
    if section.get("denied_reply") == "":
        section.pop("denied_reply")
        found.notices["ratelimit.denied_reply"] = "empty means the built-in reply"


def _rate(node: dict[str, Any], key: str, path: str, found: GoKeys) -> None:
    value = node.get(key)
    match = _GO_RATE.match(value) if isinstance(value, str) else None
    if match is not None:
        node[key] = f"{match[1]}/{match[2]}"
        found.notices[path] = f"{value!r} is read as {node[key]!r}, rousseau's COUNT/PERIOD form"


def _zero_means_default(data: dict[str, Any], found: GoKeys) -> None:
    """rousseau-agent read 0 as "the default" where rousseau wants a positive number."""
    compression = _mapping(_mapping(data, "agent"), "compression")
    for key in ("trigger_messages", "keep_recent"):
        if compression is not None and _is_zero(compression.get(key)):
            compression.pop(key)
            default = CompressionConfig.model_fields[key].default
            found.notices[f"agent.compression.{key}"] = f"0 means the default, {default}"
    for name, model in _PROVIDERS.items():
        section = _mapping(data, name)
        if section is not None and _is_zero(section.get("max_tokens")):
            section.pop("max_tokens")
            default = model.model_fields["max_tokens"].default
            found.notices[f"{name}.max_tokens"] = f"0 means the default, {default}"
