"""Bedrock and Vertex: the Anthropic SDK's cloud clients against wire-level fakes on 127.0.0.1."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from rousseau.agent import (
    ConfigError,
    Message,
    ProviderAuthError,
    ProviderError,
    Request,
    StopReason,
    StreamEventKind,
    ToolDefinition,
)
from rousseau.providers.anthropic import MessagesProvider
from rousseau.providers.bedrock import BedrockProvider
from rousseau.providers.vertex import VertexProvider
from tests.fakes.llm import (
    FakeLLMServer,
    JSONReply,
    a_text,
    a_tool,
    anthropic_error,
    anthropic_message,
    anthropic_stream,
    bedrock_stream,
    google_token,
)
from tests.helpers import free_port
from tests.providers.clients import close_clients, track  # noqa: F401 - fixture

pytestmark = pytest.mark.anyio

TOOL = ToolDefinition(
    name="write",
    description="Write a file",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Credentials from the environment only: no profile files, never the metadata service."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    for var in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        monkeypatch.delenv(var, raising=False)


def bedrock(server: FakeLLMServer, **kw: Any) -> BedrockProvider:
    p = BedrockProvider(
        model="anthropic.claude-test-v1:0", region="us-east-1", base_url=server.url, **kw
    )
    track(p)
    return p


@functools.cache
def _private_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def credentials_file(tmp_path: Path, server: FakeLLMServer) -> str:
    """A service-account key whose token endpoint is the fake: google-auth signs a JWT for it."""
    server.routes["/token"] = google_token
    path = tmp_path / "service-account.json"
    path.write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "my-project",
                "private_key_id": "k1",
                "private_key": _private_key(),
                "client_email": "rousseau@my-project.iam.gserviceaccount.com",
                "client_id": "1",
                "token_uri": server.url + "/token",
            }
        )
    )
    return str(path)


def vertex(server: FakeLLMServer, tmp_path: Path, **kw: Any) -> VertexProvider:
    p = VertexProvider(
        model="claude-test@2025",
        region="us-east5",
        credentials_file=credentials_file(tmp_path, server),
        base_url=server.url + "/v1",
        **kw,
    )
    track(p)
    return p


Factory = Callable[[FakeLLMServer, Path], MessagesProvider]
CLOUDS: dict[str, Factory] = {
    "bedrock": lambda server, tmp: bedrock(server),
    "vertex": lambda server, tmp: vertex(server, tmp),
}


def streamed(cloud: str, message: dict[str, Any]) -> Any:
    return bedrock_stream(message) if cloud == "bedrock" else anthropic_stream(message)


def request(*messages: Message) -> Request:
    return Request(
        session_id="s",
        system="Be brief.",
        messages=list(messages) or [Message.user("hi")],
        tools=[TOOL],
    )


@pytest.mark.parametrize("cloud", CLOUDS)
async def test_plain_text_with_tools_cache_marks_and_usage(
    cloud: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.push(JSONReply(anthropic_message(a_text("Hello!"), cache_read=7, cache_write=3)))
    response = await CLOUDS[cloud](fake_llm, tmp_path).complete(request())
    assert response.message.text == "Hello!"
    assert (response.usage.cache_read_tokens, response.usage.cache_write_tokens) == (7, 3)
    sent = fake_llm.posts()[0]
    if cloud == "bedrock":
        assert sent.path == "/model/anthropic.claude-test-v1:0/invoke"
        assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "anthropic_version" in sent.body and "model" not in sent.body
    else:
        assert sent.path == (
            "/v1/projects/my-project/locations/us-east5/publishers/anthropic/models/"
            "claude-test@2025:rawPredict"
        )
        assert sent.headers["authorization"] == "Bearer ya29.fake-token"
        [token_request] = [r for r in fake_llm.requests if r.path == "/token"]
        assert "assertion=" in token_request.body["_raw"]  # a signed JWT grant
        assert "anthropic_version" in sent.body and "model" not in sent.body
    # Full tool definitions, `required` included; the reference daemon sent none.
    assert sent.body["tools"] == [
        {
            "name": "write",
            "description": "Write a file",
            "input_schema": TOOL.input_schema,
        }
    ]
    assert sent.body["tools"][0]["input_schema"]["required"] == ["path", "content"]
    assert sent.body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent.body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize("cloud", CLOUDS)
async def test_streamed_text_and_tool_calls(
    cloud: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    message = anthropic_message(
        a_text("Writing it now."),
        a_tool("write", {"path": "a.md", "content": "# A"}, id="toolu_7"),
        stop_reason="tool_use",
        output_tokens=21,
    )
    fake_llm.push(streamed(cloud, message))
    events = [e async for e in CLOUDS[cloud](fake_llm, tmp_path).stream(request())]
    deltas = [e.text for e in events if e.kind is StreamEventKind.TEXT]
    assert len(deltas) > 1 and "".join(deltas) == "Writing it now."
    final = events[-1].response
    assert final is not None and final.stop_reason is StopReason.TOOL_USE
    [use] = final.message.tool_uses
    assert (use.id, use.input) == ("toolu_7", {"path": "a.md", "content": "# A"})
    assert final.usage.output_tokens == 21
    sent = fake_llm.posts()[0]
    assert sent.path.endswith(
        "/invoke-with-response-stream" if cloud == "bedrock" else ":streamRawPredict"
    )
    assert sent.body["tools"][0]["input_schema"]["required"] == ["path", "content"]


@pytest.mark.parametrize("cloud", CLOUDS)
async def test_rate_limit_with_retry_after_then_success(
    cloud: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    limited = anthropic_error(429, "slow down", "rate_limit_error")
    limited.headers["retry-after"] = "1"
    fake_llm.push(limited, JSONReply(anthropic_message(a_text("ok now"))))
    started = time.monotonic()
    response = await CLOUDS[cloud](fake_llm, tmp_path).complete(request())
    assert response.message.text == "ok now"
    assert len(fake_llm.posts()) == 2
    assert time.monotonic() - started >= 0.9, "Retry-After was not honoured"


@pytest.mark.parametrize("cloud", CLOUDS)
async def test_auth_failure_fails_fast(cloud: str, fake_llm: FakeLLMServer, tmp_path: Path) -> None:
    fake_llm.push(anthropic_error(403, "The security token included in the request is invalid."))
    with pytest.raises(ProviderAuthError) as err:
        await CLOUDS[cloud](fake_llm, tmp_path).complete(request())
    assert len(fake_llm.posts()) == 1
    assert str(err.value).startswith(f"{cloud}: HTTP 403: The security token")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cloud", CLOUDS)
async def test_connection_refused(cloud: str, tmp_path: Path) -> None:
    port = free_port()
    server = FakeLLMServer().start()  # serves the token for vertex; the model URL is closed
    try:
        if cloud == "bedrock":
            p: MessagesProvider = BedrockProvider(
                model="m", region="us-east-1", base_url=f"http://127.0.0.1:{port}", max_retries=0
            )
        else:
            p = VertexProvider(
                model="m",
                region="us-east5",
                credentials_file=credentials_file(tmp_path, server),
                base_url=f"http://127.0.0.1:{port}/v1",
                max_retries=0,
            )
        track(p)
        with pytest.raises(
            ProviderError, match=rf"^{cloud}: cannot connect to http://127.0.0.1:{port}"
        ):
            await p.complete(request())
    finally:
        server.stop()


async def test_bedrock_missing_credentials_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(
        ConfigError, match="bedrock: no AWS credentials found; set AWS_ACCESS_KEY_ID"
    ):
        BedrockProvider(model="m", region="us-east-1")
    with pytest.raises(ConfigError, match=r"bedrock\.region: not set"):
        BedrockProvider(model="m")


async def test_vertex_missing_credentials_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="vertex: no Google credentials found"):
        VertexProvider(model="m", region="us-east5")
    broken = tmp_path / "broken.json"
    broken.write_text('{"type": "nonsense"}')
    with pytest.raises(
        ConfigError, match=r"vertex\.credentials_file: .* holds .nonsense. credentials"
    ):
        VertexProvider(model="m", region="us-east5", credentials_file=str(broken))
