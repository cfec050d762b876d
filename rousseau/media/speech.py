"""Spoken replies (DESIGN.md section 9, `speech`): an answer's text made fit to be heard, said
by any OpenAI-compatible `/audio/speech` endpoint (OpenAI; Kokoro, Piper and other local
servers behind that API) through the openai SDK, and transcoded by PyAV (FFmpeg's libraries)
into the OGG/Opus voice note every platform plays with a play button.

Nothing here is imported before the first spoken reply: the SDK and PyAV load then, in a
thread.
"""

from __future__ import annotations

import array
import importlib.util
import io
import os
import re
from dataclasses import dataclass
from typing import Any

import anyio

from rousseau.agent import MissingExtraError, ProviderError

NOTE_RATE = 48_000
"""Opus's own sample rate: what every platform's voice note is encoded at."""
WAVEFORM_BARS = 64
"""The bars of a voice note's waveform (Discord's and WhatsApp's preview)."""

# Markdown as a reader hears it, not as it is written. Hand-rolled: the Markdown libraries
# render to HTML, and what is said instead of a code block or a long link is ours to choose.
_FENCE = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.I)
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_EMPHASIS = re.compile(r"(\*{1,3}|_{1,3}|~~)(?=\S)(.+?)(?<=\S)\1")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.M)
_QUOTE = re.compile(r"^\s{0,3}>\s?", re.M)
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?:\[[ xX]\]\s+)?", re.M)
_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$", re.M)
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$", re.M)
_SENTENCE = re.compile(r"(?<=[.!?…])\s+(?=\S)")
SHORT_URL = 30
"""A bare link at most this long (a domain) is read out; a longer one is not."""


def spoken_text(markdown: str) -> str:
    """The answer as it is said: no Markdown marks, code blocks and long links left out and
    named in a few words, lines joined into sentences."""
    text = _FENCE.sub(" (a code block, in the text) ", markdown)
    text = _LINK.sub(lambda m: m.group(1) or "(a link)", text)
    text = _URL.sub(lambda m: m.group(0) if len(m.group(0)) <= SHORT_URL else "(a link)", text)
    text = _INLINE_CODE.sub(r"\1", text)
    for _ in range(2):  # nested emphasis: ***both*** and **_mixed_**
        text = _EMPHASIS.sub(r"\2", text)
    for mark in (_TABLE_RULE, _RULE, _HEADING, _QUOTE, _BULLET):
        text = mark.sub("", text)
    text = text.replace("|", ", ")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = " ".join(line if line[-1] in ".!?:;,…" else line + "." for line in lines)
    return re.sub(r"\s{2,}", " ", joined).strip()


def split_spoken(text: str, max_chars: int, max_notes: int) -> tuple[list[str], bool]:
    """The text in parts of at most `max_chars`, cut between sentences (a sentence longer
    than that between words), at most `max_notes` of them; and whether some was left out."""
    parts: list[str] = []
    current = ""
    for sentence in _SENTENCE.split(text):
        while len(sentence) > max_chars:  # one long sentence: cut between words
            cut = sentence.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            if current:
                parts.append(current)
                current = ""
            parts.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if current and len(current) + 1 + len(sentence) > max_chars:
            parts.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}".strip()
    if current:
        parts.append(current)
    return parts[:max_notes], len(parts) > max_notes


REST_IN_TEXT = "The rest is in the text."


def speakable(answer: str, *, max_chars: int, max_notes: int) -> list[str]:
    """What of an answer is said, note by note: its spoken text cut between sentences, at
    most `max_notes` notes, the last saying so when the rest is left to the text."""
    parts, cut = split_spoken(spoken_text(answer), max_chars, max_notes)
    if cut and parts:
        parts[-1] = f"{parts[-1]} {REST_IN_TEXT}"
    return parts


@dataclass(frozen=True, slots=True)
class VoiceNote:
    """Audio as a voice note: OGG/Opus bytes, their length and their waveform."""

    data: bytes
    duration: float
    """Seconds."""
    waveform: bytes
    """WAVEFORM_BARS loudness values, 0 to 255."""


def voice_note(audio: bytes) -> VoiceNote:
    """Any audio FFmpeg reads (WAV, MP3, OGG, FLAC...) as a mono 48 kHz OGG/Opus voice note.
    Blocking (a minute of speech costs a few tenths of a second of CPU): call it in a
    thread. ValueError when the audio cannot be read."""
    import av

    try:
        source = av.open(io.BytesIO(audio), mode="r")
    except av.FFmpegError as exc:
        raise ValueError(f"unreadable audio: {exc}") from exc
    out = io.BytesIO()
    samples = array.array("h")
    with source, av.open(out, "w", format="ogg") as note:
        stream: Any = note.add_stream("libopus", rate=NOTE_RATE, layout="mono")
        stream.bit_rate = 32_000
        resampler = av.AudioResampler(format="s16", layout="mono", rate=NOTE_RATE)
        try:
            frames = list(source.decode(audio=0))
        except (av.FFmpegError, IndexError) as exc:
            raise ValueError(f"unreadable audio: {exc}") from exc
        for frame in [*frames, None]:
            for resampled in resampler.resample(frame):
                samples.frombytes(bytes(resampled.planes[0])[: resampled.samples * 2])
                for packet in stream.encode(resampled):
                    note.mux(packet)
        for packet in stream.encode(None):
            note.mux(packet)
    if not samples:
        raise ValueError("the audio holds no sound")
    return VoiceNote(
        data=out.getvalue(), duration=len(samples) / NOTE_RATE, waveform=_waveform(samples)
    )


def _waveform(samples: array.array[int]) -> bytes:
    """The loudest sample of each of WAVEFORM_BARS slices, scaled to 0-255."""
    size = max(1, len(samples) // WAVEFORM_BARS)
    peaks = []
    for start in range(0, size * WAVEFORM_BARS, size):
        part = samples[start : start + size]
        peaks.append(max(max(part, default=0), -min(part, default=0)) if part else 0)
    loudest = max(peaks) or 1
    return bytes(min(255, peak * 255 // loudest) for peak in peaks)


class Speaker:
    """Text into speech, through an OpenAI-compatible `/audio/speech`; built from `speech`.
    The SDK is imported and its client made at the first spoken reply, in a thread."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        voice: str,
        timeout: float = 60.0,
    ) -> None:
        if importlib.util.find_spec("openai") is None or importlib.util.find_spec("av") is None:
            raise MissingExtraError("spoken replies", "voice")
        self.model = model
        self.voice = voice
        self.base_url = base_url
        self._options: dict[str, Any] = {
            "api_key": api_key or "unused",
            "base_url": base_url,
            "timeout": timeout,
            "max_retries": 1,
        }
        self._client: Any = None

    async def say(self, text: str) -> VoiceNote:
        """`text` spoken, as a voice note; ProviderError naming the endpoint when the speech
        cannot be had or read."""
        if self._client is None:
            self._client = await anyio.to_thread.run_sync(self._make_client)
        import openai

        try:
            response = await self._client.audio.speech.create(
                model=self.model, voice=self.voice, input=text, response_format="wav"
            )
            audio = await response.aread()
        except openai.APIError as exc:
            raise ProviderError("speech", f"{self.base_url}: {exc} (check speech)") from exc
        try:
            return await anyio.to_thread.run_sync(voice_note, audio)
        except ValueError as exc:
            raise ProviderError("speech", f"{self.base_url} sent {exc}") from exc

    def _make_client(self) -> Any:
        import openai

        return openai.AsyncOpenAI(**self._options)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()


class LocalSpeaker:
    """Text into speech in this process, with Piper's engine (piper-tts: ONNX voices people
    download themselves, a .onnx with its .onnx.json); the voice is loaded at the first
    spoken reply, in a thread, and each note is made in a thread too."""

    model = "piper"

    def __init__(self, voice: str) -> None:
        if importlib.util.find_spec("piper") is None or importlib.util.find_spec("av") is None:
            raise MissingExtraError("spoken replies with the piper engine", "voice-local")
        self.path = voice
        self._voice: Any = None
        self._lock = anyio.Lock()

    async def say(self, text: str) -> VoiceNote:
        async with self._lock:  # one voice, loaded once; one note made at a time
            try:
                return await anyio.to_thread.run_sync(self._say, text)
            except (OSError, ValueError, RuntimeError) as exc:
                raise ProviderError("speech", f"piper voice {self.path}: {exc}") from exc

    def _say(self, text: str) -> VoiceNote:
        import wave

        if self._voice is None:
            from piper import PiperVoice

            self._voice = PiperVoice.load(os.path.expanduser(self.path))
        audio = io.BytesIO()
        with wave.open(audio, "wb") as out:
            self._voice.synthesize_wav(text, out)
        return voice_note(audio.getvalue())
