"""Attachments in the request bodies: image and PDF blocks on the Messages API (Anthropic,
Bedrock, Vertex), image_url data parts on OpenAI-compatible servers, and the stand-in text
where the model has no vision or the file is of a kind it cannot take."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import pytest

from rousseau.agent import Attachment, Content, Message, Request, Role
from rousseau.providers.anthropic import AnthropicProvider
from rousseau.providers.openai import OpenAIProvider
from tests.fakes.llm import FakeLLMServer, JSONReply, a_text, anthropic_message, openai_completion
from tests.providers.clients import close_clients, track  # noqa: F401 - fixture
from tests.providers.test_cloud import CLOUDS, aws_env  # noqa: F401 - fixture

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
PDF = b"%PDF-1.4\n%fake\n"
CSV = b"a,b\n1,2\n"


def attach(data: bytes, media_type: str, name: str) -> Attachment:
    return Attachment(
        sha256=hashlib.sha256(data).hexdigest(),
        media_type=media_type,
        size=len(data),
        name=name,
        saved_as=f"inbox/2026-12-01/{name}",
    )


PHOTO = attach(PNG, "image/png", "receipt.png")
REPORT = attach(PDF, "application/pdf", "report.pdf")
TABLE = attach(CSV, "text/csv", "table.csv")


def request(*attachments: Attachment, media: bool = True) -> Request:
    message = Message(
        role=Role.USER,
        content=[Content.of_text("what is this?"), *map(Content.of_attachment, attachments)],
    )
    blobs = {PHOTO.sha256: PNG, REPORT.sha256: PDF, TABLE.sha256: CSV} if media else {}
    return Request(session_id="s", system="", messages=[message], media=blobs)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def messages_api_blocks() -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": "what is this?"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)},
        },
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)},
        },
        {
            "type": "text",
            "text": "[file: table.csv, 8 bytes, saved as inbox/2026-12-01/table.csv]",
        },
    ]


def without_cache_marks(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]


async def test_anthropic_sends_image_and_pdf_blocks(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(JSONReply(anthropic_message(a_text("A receipt."))))
    p = track(AnthropicProvider(api_key="k", model="m", base_url=fake_llm.url, max_retries=0))
    await p.complete(request(PHOTO, REPORT, TABLE))
    [sent] = fake_llm.posts()
    assert without_cache_marks(sent.body["messages"][0]["content"]) == messages_api_blocks()


@pytest.mark.parametrize("cloud", CLOUDS)
@pytest.mark.usefixtures("aws_env")
async def test_bedrock_and_vertex_send_image_and_pdf_blocks(
    cloud: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    fake_llm.push(JSONReply(anthropic_message(a_text("A receipt."))))
    await CLOUDS[cloud](fake_llm, tmp_path).complete(request(PHOTO, REPORT, TABLE))
    [sent] = [r for r in fake_llm.posts() if r.path != "/token"]
    assert without_cache_marks(sent.body["messages"][0]["content"]) == messages_api_blocks()


async def test_a_messages_model_without_vision_gets_stand_ins(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(JSONReply(anthropic_message(a_text("ok"))))
    p = track(
        AnthropicProvider(
            api_key="k", model="m", base_url=fake_llm.url, max_retries=0, vision=False
        )
    )
    await p.complete(request(PHOTO, REPORT))
    [sent] = fake_llm.posts()
    assert without_cache_marks(sent.body["messages"][0]["content"]) == [
        {"type": "text", "text": "what is this?"},
        {
            "type": "text",
            "text": "[photo: receipt.png, 40 bytes, saved as inbox/2026-12-01/receipt.png]",
        },
        {
            "type": "text",
            "text": "[file: report.pdf, 15 bytes, saved as inbox/2026-12-01/report.pdf]",
        },
    ]


def openai_provider(server: FakeLLMServer, **kw: Any) -> OpenAIProvider:
    return track(
        OpenAIProvider(api_key="k", model="m", base_url=server.url + "/v1", max_retries=0, **kw)
    )


async def test_openai_compatible_sends_images_as_data_urls(fake_llm: FakeLLMServer) -> None:
    fake_llm.push(JSONReply(openai_completion("A receipt.")))
    await openai_provider(fake_llm).complete(request(PHOTO, REPORT))
    [sent] = fake_llm.posts()
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "what is this?\n"
                    "[file: report.pdf, 15 bytes, saved as inbox/2026-12-01/report.pdf]",
                },
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(PNG)}},
            ],
        }
    ]


@pytest.mark.parametrize("why", ["no vision", "bytes gone"])
async def test_openai_compatible_without_vision_or_bytes_gets_stand_ins(
    fake_llm: FakeLLMServer, why: str
) -> None:
    fake_llm.push(JSONReply(openai_completion("ok")))
    p = openai_provider(fake_llm, vision=why != "no vision")
    await p.complete(request(PHOTO, media=why != "bytes gone"))
    [sent] = fake_llm.posts()
    assert sent.body["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "what is this?\n"
                    "[photo: receipt.png, 40 bytes, saved as inbox/2026-12-01/receipt.png]",
                }
            ],
        }
    ]
