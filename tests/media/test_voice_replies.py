"""Spoken replies through `rousseau run` on Telegram: a voice note in (transcribed by the fake
whisper beside the fake model) is answered with the text and a Telegram voice message whose
bytes are OGG/Opus of the length the fake speech server spoke; what was said has no Markdown,
code or long link; /voice off and on; a failing speech server still delivers the text."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import (
    FakeLLMServer,
    JSONReply,
    Recorded,
    Reply,
    SSEReply,
    openai_completion,
    openai_stream,
)
from tests.fakes.speech import SECONDS_PER_CHAR, FakeSpeech
from tests.fakes.telegram import FakeTelegram, Sent
from tests.faults.support import edit_config, wait_until
from tests.test_daemon import Daemon, daemon, llm  # noqa: F401 - fixtures

av = pytest.importorskip("av", reason="PyAV (the voice extra) reads the voice notes")

OGG = b"OggS" + bytes(200)
ANSWER = (
    "**Sure.** Run `make` first:\n"
    "```sh\nmake install\n```\n"
    "Then read https://example.org/docs/a/rather/long/path/to/the/install/guide.html please."
)
SPOKEN = "Sure. Run make first: (a code block, in the text). Then read (a link) please."


def answering(recorded: Recorded) -> Reply:
    """Whisper hears 'how do I install it'; the model answers ANSWER to it, else echoes."""
    if recorded.path.endswith("/audio/transcriptions"):
        return JSONReply({"text": "how do I install it"})
    last = recorded.body["messages"][-1]["content"]
    if isinstance(last, list):
        last = " ".join(p.get("text", "") for p in last)
    text = ANSWER if "install" in last else f"echo: {last}"
    completion = openai_completion(text)
    return openai_stream(completion) if recorded.body.get("stream") else JSONReply(completion)


@pytest.fixture
def speech() -> Iterator[FakeSpeech]:
    fake = FakeSpeech().start()
    yield fake
    fake.stop()


def speaking(daemon: Daemon, llm: FakeLLMServer, speech: FakeSpeech, **transport: Any) -> None:  # noqa: F811
    def change(config: dict[str, Any]) -> None:
        config["media"] = {"transcription": {"base_url": llm.url + "/v1", "model": "whisper"}}
        config["speech"] = {"base_url": speech.base_url, "model": "tts-1", "voice": "nova"}
        config["telegram"].update(streaming="off", **transport)

    edit_config(daemon, change)
    llm.responder = answering


def voices(telegram: FakeTelegram) -> list[Sent]:
    return [s for s in telegram.sent if s.params.get("_kind") == "voice"]


def played(data: bytes) -> tuple[str, str, float]:
    """The container, codec and seconds of a voice note, as PyAV reads it."""
    with av.open(io.BytesIO(data)) as note:
        stream = note.streams.audio[0]
        assert note.duration is not None
        return note.format.name, stream.codec_context.name, note.duration / 1_000_000


def test_a_voice_note_is_answered_with_the_text_and_a_voice_message(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
    speech: FakeSpeech,
) -> None:
    speaking(daemon, llm, speech)
    daemon.start()
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    assert wait_until(lambda: len(voices(telegram)) == 1, timeout=30), daemon.log.read_text()[
        -3000:
    ]
    [text] = [s for s in telegram.sent if "_kind" not in s.params]
    assert text.text == ANSWER  # the whole answer, as text, first
    assert telegram.sent.index(text) < telegram.sent.index(voices(telegram)[0])
    [said] = speech.said
    assert (said.model, said.voice, said.text) == ("tts-1", "nova", SPOKEN)
    [note] = voices(telegram)
    kind, codec, seconds = played(note.params["_data"])
    assert (kind, codec) == ("ogg", "opus")
    assert abs(seconds - len(SPOKEN) * SECONDS_PER_CHAR) < 0.2
    assert abs(int(note.params["duration"]) - seconds) <= 1
    # a typed message is answered in text alone (voice_replies: when_voice)
    telegram.push("hello there")
    assert wait_until(lambda: any(s.text == "echo: hello there" for s in telegram.sent), 20)
    assert len(speech.said) == 1 and len(voices(telegram)) == 1


def test_voice_off_and_on_in_a_chat(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
    speech: FakeSpeech,
) -> None:
    speaking(daemon, llm, speech)
    daemon.start()
    telegram.push("/voice off")
    assert wait_until(lambda: any("Voice replies are off" in s.text for s in telegram.sent), 20)
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    assert wait_until(lambda: any(s.text == ANSWER for s in telegram.sent), 20)
    telegram.push("/voice on")
    assert wait_until(lambda: any("Voice replies are on" in s.text for s in telegram.sent), 20)
    telegram.push("say hi")  # typed, and still spoken: /voice on speaks every answer here
    assert wait_until(lambda: len(voices(telegram)) == 1, timeout=30)
    assert [s.text for s in speech.said] == ["echo: say hi."]


def test_a_failing_speech_server_still_delivers_the_text(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
    speech: FakeSpeech,
) -> None:
    speech.fail = True
    speaking(daemon, llm, speech, voice_replies="always")
    daemon.start()
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    assert wait_until(lambda: any(s.text == ANSWER for s in telegram.sent), 20)
    assert wait_until(lambda: len(speech.said) >= 1, 20)
    telegram.push("and now?")
    assert wait_until(lambda: any(s.text == "echo: and now?" for s in telegram.sent), 20)
    assert voices(telegram) == []
    assert "router.speech_failed" in daemon.log.read_text()


def test_a_streamed_reply_still_streams_and_the_voice_note_follows(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
    speech: FakeSpeech,
) -> None:
    speaking(daemon, llm, speech)
    edit_config(daemon, lambda c: c["telegram"].update(streaming="edit"))

    def slowly(recorded: Recorded) -> Reply:  # written over ~2 s: the preview shows it
        reply = answering(recorded)
        if isinstance(reply, SSEReply):
            reply.pace = 2.0 / len(reply.events)
        return reply

    llm.responder = slowly
    daemon.start()
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    assert wait_until(lambda: len(voices(telegram)) == 1, timeout=30)
    [preview] = [s for s in telegram.sent if "_kind" not in s.params]
    assert preview.shown == ANSWER  # streamed into one message, edited to the whole answer
    assert [e for e in telegram.edits if e.message_id == preview.message_id]  # edited as written
    assert telegram.sent.index(preview) < telegram.sent.index(voices(telegram)[0])


@pytest.mark.anyio
async def test_a_web_chat_serves_a_voice_note_to_its_own_chat_alone(tmp_path: Path) -> None:
    from dataclasses import replace

    from rousseau.media import BlobStore, MediaIntake
    from rousseau.messages import Outbound
    from rousseau.web.chat import WebChat

    chat = WebChat()
    blobs = BlobStore(folder=tmp_path / "blobs")
    chat.bind_media(MediaIntake(blobs=blobs, workspace=tmp_path / "ws"))
    kept = await blobs.put(OGG, media_type="audio/ogg", name="voice-1.ogg")
    voiced = replace(kept, voice=True, duration=1.0)
    await chat.send(Outbound(transport="web", chat_id="owner", text="", attachment=voiced))
    assert await chat.voice_note("owner", kept.sha256) == OGG
    assert await chat.voice_note("carol", kept.sha256) is None  # not hers
    other = await blobs.put(b"%PDF-1.4", media_type="application/pdf", name="x.pdf")
    assert await chat.voice_note("owner", other.sha256) is None  # not a voice note sent
    assert WebChat("api").__dict__.get("max_file_bytes") is None  # the API reads text only


def test_the_in_process_piper_engine_speaks_with_a_voice_file(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
    tmp_path: Path,
) -> None:
    """speech.engine piper: no server; the voice a user put on disk (here one made for the
    test) says the answer, in the daemon's own process."""
    pytest.importorskip("piper", reason="piper-tts (the voice-local extra) is not installed")
    pytest.importorskip("onnx", reason="onnx makes the test's Piper voice")
    from tests.fakes.piper_voice import PER_PHONEME, RATE, make_voice

    voice = make_voice(tmp_path / "voice.onnx")

    def change(config: dict[str, Any]) -> None:
        config["media"] = {"transcription": {"base_url": llm.url + "/v1", "model": "whisper"}}
        config["speech"] = {"engine": "piper", "voice": str(voice)}
        config["telegram"].update(streaming="off")

    edit_config(daemon, change)
    llm.responder = answering
    daemon.start()
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    assert wait_until(lambda: len(voices(telegram)) == 1, timeout=30), daemon.log.read_text()[
        -3000:
    ]
    kind, codec, seconds = played(voices(telegram)[0].params["_data"])
    assert (kind, codec) == ("ogg", "opus")
    # Piper's text phonemes are the spoken text's characters, each followed by a pause id,
    # between a start and an end mark: 256 samples each at 22,050 Hz
    shortest, longest = (
        len(SPOKEN) * PER_PHONEME / RATE,
        (2 * len(SPOKEN) + 3) * PER_PHONEME / RATE,
    )
    assert shortest < seconds <= longest + 0.05, (seconds, shortest, longest)


def test_speech_config_errors_name_the_key(tmp_path: Path) -> None:
    from rousseau.agent import ConfigError
    from rousseau.config import load_config

    path = tmp_path / "config.yaml"
    for bad, says in (
        ({"model": "tts-1"}, "base_url: needed by the openai engine"),
        ({"engine": "piper", "voice": "alloy"}, "voice: the piper engine takes a voice's .onnx"),
        ({"base_url": "ftp://x"}, "speech.base_url"),
        ({"base_url": "http://x", "max_notes": 0}, "speech.max_notes"),
    ):
        path.write_text(json.dumps({"speech": bad}))
        with pytest.raises(ConfigError, match=r"speech") as raised:
            load_config(str(path), {"HOME": str(tmp_path)})
        assert says in str(raised.value), str(raised.value)
