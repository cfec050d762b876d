"""Client-side overhead per request for each provider, against a zero-latency local fake.

Each request's wall time minus the time the fake server spent answering it: what remains is
the SDK, rousseau's mapping, HTTP on loopback and (claudecli) starting the subprocess.
Prints median and p99 per provider, plain and streamed.
"""

from __future__ import annotations

import json
import os
import stat
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rousseau.agent import Message, Provider, Request, StreamingProvider, ToolDefinition  # noqa: E402
from rousseau.log import configure_logging  # noqa: E402
from tests.fakes.llm import (  # noqa: E402
    FakeLLMServer,
    JSONReply,
    Recorded,
    Reply,
    a_text,
    anthropic_message,
    anthropic_stream,
    bedrock_stream,
    google_token,
    openai_completion,
    openai_stream,
)

REQUESTS = 200
TOOLS = [
    ToolDefinition(
        name=name,
        description=f"The {name} tool",
        input_schema={
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    )
    for name in ("read", "write", "edit", "grep", "bash")
]


def request() -> Request:
    history: list[Message] = []
    for i in range(10):
        history += [Message.user(f"question {i} " * 20), Message.assistant(f"answer {i} " * 40)]
    return Request(
        session_id="bench",
        system="You are terse.",
        messages=[*history, Message.user("go")],
        tools=TOOLS,
    )


class TimedServer(FakeLLMServer):
    """Records how long each answer took on the server side."""

    def __init__(self, reply: Callable[[Recorded], Reply]) -> None:
        super().__init__()
        self.responder = reply
        self.server_seconds: list[float] = []

    def _send(self, handler: Any, reply: Reply) -> None:
        started = time.perf_counter()
        super()._send(handler, reply)
        self.server_seconds.append(time.perf_counter() - started)


def streaming(kind: str) -> Callable[[Recorded], Reply]:
    message = anthropic_message(a_text("Fine, done. " * 10))
    completion = openai_completion("Fine, done. " * 10)

    def reply(recorded: Recorded) -> Reply:
        is_stream = bool(recorded.body.get("stream")) or "stream" in recorded.path.lower()
        if kind == "openai":
            return openai_stream(completion) if is_stream else JSONReply(completion)
        if kind == "bedrock" and is_stream:
            return bedrock_stream(message)
        return anthropic_stream(message) if is_stream else JSONReply(message)

    return reply


async def measure(provider: Provider, server: TimedServer | None) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"plain": [], "streamed": []}
    for mode in out:
        for i in range(REQUESTS + 10):
            before = len(server.server_seconds) if server else 0
            started = time.perf_counter()
            if mode == "plain":
                await provider.complete(request())
            else:
                assert isinstance(provider, StreamingProvider)
                async for _ in provider.stream(request()):
                    pass
            elapsed = time.perf_counter() - started
            served = sum(server.server_seconds[before:]) if server else 0.0
            if i >= 10:  # warm-up: connection set-up, first imports
                out[mode].append((elapsed - served) * 1000)
    return out


def fake_claude(folder: Path) -> str:
    script = folder / "claude"
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\nsys.stdin.read()\n"
        "r = {'type': 'result', 'subtype': 'success', 'is_error': False, 'result': 'ok',"
        " 'usage': {'input_tokens': 1, 'output_tokens': 1}}\n"
        "fmt = sys.argv[sys.argv.index('--output-format') + 1]\n"
        "print(json.dumps(r))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


async def main() -> None:
    configure_logging("error")
    os.environ.update(
        AWS_ACCESS_KEY_ID="AKIDEXAMPLE",
        AWS_SECRET_ACCESS_KEY="secret",
        AWS_EC2_METADATA_DISABLED="true",
    )
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from rousseau.providers.anthropic import AnthropicProvider
    from rousseau.providers.bedrock import BedrockProvider
    from rousseau.providers.claudecli import ClaudeCLIProvider
    from rousseau.providers.openai import OpenAIProvider
    from rousseau.providers.vertex import VertexProvider

    tmp = Path(tempfile.mkdtemp())
    results: dict[str, dict[str, list[float]]] = {}
    for kind in ("anthropic", "openai", "bedrock", "vertex"):
        server = TimedServer(streaming("openai" if kind == "openai" else kind)).start()
        server.routes["/token"] = google_token
        provider: Any
        if kind == "anthropic":
            provider = AnthropicProvider(api_key="k", model="m", base_url=server.url)
        elif kind == "openai":
            provider = OpenAIProvider(api_key="k", model="m", base_url=server.url + "/v1")
        elif kind == "bedrock":
            provider = BedrockProvider(model="m", region="us-east-1", base_url=server.url)
        else:
            key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            pem = key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode()
            creds = tmp / "sa.json"
            creds.write_text(
                json.dumps(
                    {
                        "type": "service_account",
                        "project_id": "p",
                        "private_key_id": "k",
                        "private_key": pem,
                        "client_email": "b@p.iam.gserviceaccount.com",
                        "client_id": "1",
                        "token_uri": server.url + "/token",
                    }
                )
            )
            provider = VertexProvider(
                model="m",
                region="us-east5",
                credentials_file=str(creds),
                base_url=server.url + "/v1",
            )
        results[kind] = await measure(provider, server)
        await provider.aclose()
        server.stop()
    cli = ClaudeCLIProvider(binary=fake_claude(tmp), workspace=tmp)
    results["claudecli"] = {"plain": (await measure(cli, None))["plain"][:50]}

    print(f"client-side overhead per request, {REQUESTS} requests each (ms)")
    print(f"  {'provider':<10} {'mode':<9} {'median':>8} {'p99':>8}")
    for kind, modes in results.items():
        for mode, values in modes.items():
            if not values:
                continue
            p99 = statistics.quantiles(values, n=100)[98] if len(values) >= 100 else max(values)
            print(f"  {kind:<10} {mode:<9} {statistics.median(values):>8.2f} {p99:>8.2f}")
    print("  (claudecli: wall time of spawning a minimal fake CLI; its own latency dominates)")


if __name__ == "__main__":
    anyio.run(main)
