"""Spoken replies, the router's stage for them (DESIGN.md section 9): whether an answer is
also said (the transport's `voice_replies`, a chat's `/voice on|off`, whether the message was
a voice note), and its voice notes queued after its text, which is never held back for them
nor lost when speech fails. And the hint a chat gets once when nobody can hear its voice
notes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import structlog

from rousseau.agent import Attachment, RousseauError
from rousseau.costs import Meter, Payer
from rousseau.messages import Inbound, KeyValue
from rousseau.router.settings import RouterSettings

log = structlog.get_logger("rousseau.router")

HINTED = "rousseau.voice_hint:"
"""+ chat id: a transport's state key, set once the chat was given the voice hint."""
CHOSEN = "rousseau.voice:"
"""+ chat id: a transport's state key, `on` or `off` as /voice set it."""
SPEECH_PRICES = {"tts-1": 15.0, "tts-1-hd": 30.0, "gpt-4o-mini-tts": 15.0}
"""USD per million characters (gpt-4o-mini-tts's per-minute price, as characters)."""


class Note(Protocol):
    """A voice note made (rousseau.media.speech.VoiceNote): OGG/Opus, seconds, waveform."""

    @property
    def data(self) -> bytes: ...

    @property
    def duration(self) -> float: ...

    @property
    def waveform(self) -> bytes: ...


class Speaks(Protocol):
    """What turns text into a voice note (rousseau.media.speech.Speaker)."""

    model: str

    async def say(self, text: str) -> Note: ...


class Keeps(Protocol):
    """Where a voice note's bytes are kept for the outbox (the blob store)."""

    async def put(self, data: bytes, *, media_type: str, name: str = "") -> Attachment: ...


@dataclass(kw_only=True, slots=True)
class Speech:
    """What spoken replies need beside the router: the voice, where notes are kept, the meter
    that budgets and costs them, and how an answer is cut into notes."""

    speaker: Speaks
    blobs: Keeps
    prepare: Callable[[str], list[str]]
    """The answer's text as the parts to say (rousseau.media.speech: spoken_text, then
    split_spoken); empty: nothing worth saying."""
    meter: Meter | None = None
    price: float | None = None
    """USD per million characters; None: SPEECH_PRICES by model, else zero."""


Queue = Callable[[str, str, str | None, Sequence[tuple[Attachment, str]]], Awaitable[object]]
"""queue(transport, chat, thread, files): the notes into the outbox, after the text."""


class Voices:
    """Decides and makes the spoken part of a reply."""

    def __init__(
        self,
        *,
        settings: RouterSettings,
        kv: Callable[[str], KeyValue],
        speech: Speech | None,
        sends_files: Callable[[str], bool],
        queue: Queue,
    ) -> None:
        self._settings = settings
        self._kv = kv
        self._speech = speech
        self._sends_files = sends_files
        self._queue = queue

    async def hint(self, inbound: Inbound) -> str:
        """The voice hint, if this message carried audio and its chat was never told."""
        hint = self._settings.voice_hint
        if not hint or not _audio(inbound):
            return ""
        told = await self._kv(inbound.transport).get(HINTED + inbound.chat_id)
        return "" if told else hint

    async def replied(self, inbound: Inbound, answer: str, *, hinted: bool) -> None:
        """After an answer's text is queued: the hint remembered, the answer spoken."""
        if hinted:
            await self._kv(inbound.transport).set(HINTED + inbound.chat_id, "1")
        if answer and await self.wanted(inbound):
            await self._speak(inbound, answer)

    async def wanted(self, inbound: Inbound) -> bool:
        if self._speech is None or not self._sends_files(inbound.transport):
            return False
        chosen = await self._kv(inbound.transport).get(CHOSEN + inbound.chat_id)
        if chosen is not None:
            return chosen == "on"
        mode = self._settings.voice_replies.get(inbound.transport, "when_voice")
        return mode == "always" or (mode == "when_voice" and _audio(inbound))

    async def _speak(self, inbound: Inbound, answer: str) -> None:
        speech = self._speech
        assert speech is not None
        payer = Payer.of(inbound, "")
        files: list[tuple[Attachment, str]] = []
        try:
            for n, part in enumerate(speech.prepare(answer), 1):
                if speech.meter is not None:
                    await speech.meter.check(payer)
                note = await speech.speaker.say(part)
                await self._charge(payer, len(part))
                kept = await speech.blobs.put(
                    note.data, media_type="audio/ogg", name=f"voice-{n}.ogg"
                )
                voiced = replace(kept, voice=True, duration=note.duration, waveform=note.waveform)
                files.append((voiced, ""))
        except (RousseauError, OSError) as exc:  # the text is out already: only voice is lost
            log.warning("router.speech_failed", error=str(exc), notes=len(files))
        except Exception:  # a bug here must not fail (and so retry) a message answered already
            log.exception("router.speech_failed", notes=len(files))
        if files:
            await self._queue(inbound.transport, inbound.chat_id, inbound.thread_id, files)

    async def _charge(self, payer: Payer, chars: int) -> None:
        speech = self._speech
        if speech is None or speech.meter is None:
            return
        price = speech.price
        if price is None:
            price = SPEECH_PRICES.get(speech.speaker.model, 0.0)
        await speech.meter.charge(
            payer, model=speech.speaker.model, usd=chars * price / 1_000_000, job="speech"
        )


def _audio(inbound: Inbound) -> bool:
    return any(a.media_type.startswith("audio/") for a in inbound.attachments)


def modes(sections: Mapping[str, str | None], speaking: bool) -> dict[str, str]:
    """Each transport's voice_replies, unset ones as when_voice (off without speech)."""
    return {name: (mode or "when_voice") if speaking else "off" for name, mode in sections.items()}
