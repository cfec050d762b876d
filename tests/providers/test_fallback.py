"""Fallback: a failed primary hands the request to the next provider, and the log says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from rousseau.agent import Agent, Message, ProviderAuthError, Request, Session
from rousseau.config import load_config
from rousseau.providers import build_provider
from rousseau.providers.anthropic import AnthropicProvider
from rousseau.providers.fallback import FallbackProvider
from rousseau.providers.openai import OpenAIProvider
from tests.fakes.llm import (
    FakeLLMServer,
    a_text,
    anthropic_error,
    anthropic_message,
    anthropic_stream,
    openai_completion,
    openai_error,
    openai_stream,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def second_llm() -> Iterator[FakeLLMServer]:
    server = FakeLLMServer().start()
    yield server
    server.stop()


async def test_primary_failure_switches_to_fallback(
    fake_llm: FakeLLMServer, second_llm: FakeLLMServer
) -> None:
    fake_llm.push(anthropic_error(401, "invalid x-api-key", "authentication_error"))
    second_llm.push(openai_stream(openai_completion("answered by the fallback")))
    provider = FallbackProvider(
        [
            AnthropicProvider(api_key="bad", model="m", base_url=fake_llm.url, max_retries=0),
            OpenAIProvider(api_key="k", model="m", base_url=second_llm.url + "/v1", max_retries=0),
        ]
    )
    session = Session(id="s", messages=[Message.user("hello")])
    with capture_logs() as logs:
        response = await Agent(provider).turn(session)
    await provider.aclose()
    assert response.message.text == "answered by the fallback"
    [switch] = [e for e in logs if e["event"] == "provider.fallback"]
    assert (switch["failed"], switch["next"], switch["status"]) == ("anthropic", "openai", 401)
    assert len(fake_llm.posts()) == 1 and len(second_llm.posts()) == 1


async def test_all_failing_raises_the_last_error(
    fake_llm: FakeLLMServer, second_llm: FakeLLMServer
) -> None:
    fake_llm.push(openai_error(500, "down"))
    second_llm.push(anthropic_error(401, "nope", "authentication_error"))
    provider = FallbackProvider(
        [
            OpenAIProvider(api_key="k", model="m", base_url=fake_llm.url + "/v1", max_retries=0),
            AnthropicProvider(api_key="bad", model="m", base_url=second_llm.url, max_retries=0),
        ]
    )
    request = Request(session_id="s", system="", messages=[Message.user("hi")])
    with pytest.raises(ProviderAuthError, match=r"^anthropic: HTTP 401"):
        await provider.complete(request)
    await provider.aclose()


async def test_success_never_touches_the_fallback(
    fake_llm: FakeLLMServer, second_llm: FakeLLMServer
) -> None:
    fake_llm.push(anthropic_stream(anthropic_message(a_text("primary"))))
    provider = FallbackProvider(
        [
            AnthropicProvider(api_key="k", model="m", base_url=fake_llm.url),
            OpenAIProvider(api_key="k", model="m", base_url=second_llm.url + "/v1"),
        ]
    )
    response = await Agent(provider).turn(Session(id="s", messages=[Message.user("hi")]))
    await provider.aclose()
    assert response.message.text == "primary"
    assert second_llm.posts() == []


async def test_config_fallback_list_builds_the_chain(tmp_path: Path) -> None:
    config = load_config(
        None,
        {
            "HOME": str(tmp_path),
            "ANTHROPIC_API_KEY": "k",
            "OPENAI_API_KEY": "k",
            "ROUSSEAU_FALLBACK": "openai, ollama",
        },
    )
    provider = build_provider(config)
    assert isinstance(provider, FallbackProvider)
    assert [p.name for p in provider.providers] == ["anthropic", "openai", "ollama"]
    await provider.aclose()
