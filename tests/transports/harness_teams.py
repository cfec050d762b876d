"""The Teams adapter's harness: the real adapter (Microsoft's Teams SDK) against the fake
Teams, which posts signed activities to the daemon's messaging endpoint."""

from __future__ import annotations

import base64
from typing import Any, ClassVar

from rousseau.transports.base import Transport
from rousseau.transports.teams import MAX_LENGTH, TeamsTransport
from tests.fakes.teams import (
    APP_ID,
    CHANNEL,
    CONSENT,
    OWNER,
    PASSWORD,
    PERSONAL,
    SENT_FILE,
    STRANGER,
    STRANGER_CHAT,
    FakeTeams,
)
from tests.helpers import free_port
from tests.transports.conformance import Delivered, DeliveredFile, File


class TeamsHarness:
    name = "teams"
    owner = OWNER
    stranger = STRANGER
    dm_chat = PERSONAL
    group_chat = CHANNEL
    measure = staticmethod(len)
    limit = MAX_LENGTH
    cannot: ClassVar[dict[str, str]] = {
        "drop_connection": "Teams posts each activity: there is no connection to drop",
    }

    def __init__(self) -> None:
        self.fake = FakeTeams().start()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/api/messages"
        self.fake.bot_endpoint = self.endpoint  # the owner says yes to every file
        self._last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        return TeamsTransport(
            APP_ID,
            PASSWORD,
            listen=f"127.0.0.1:{self.port}",
            service_url=self.fake.url,
            login_endpoint=self.fake.url,
            keys_url=self.fake.keys_url,
        )

    def _post(self, activity: dict[str, Any]) -> None:
        self._last = activity
        status = self.fake.post(self.endpoint, activity)
        assert status == 200, status

    def dm(self, text: str, *, sender: str | None = None) -> None:
        if sender == self.stranger:
            self._post(self.fake.message(STRANGER_CHAT, STRANGER, text))
        else:
            self._post(self.fake.message(PERSONAL, OWNER, text))

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        chat, who = (STRANGER_CHAT, STRANGER) if sender == self.stranger else (PERSONAL, OWNER)
        self._post(self.fake.message(chat, who, text, files=[(file.name, file.data)]))

    def files_delivered(self) -> list[DeliveredFile]:
        """Images sent inline (a data address), and files uploaded with the owner's consent
        and shown by a file card."""
        found = []
        for p in self.fake.messages():
            for a in p.attachments:
                url = a.get("contentUrl") or ""
                if url.startswith("data:"):
                    data = base64.b64decode(url.partition(",")[2])
                    found.append(DeliveredFile(p.chat, a.get("name", ""), data, True, p.text))
                elif a.get("contentType") == SENT_FILE:
                    data = self.fake.uploads.get(a["content"]["uniqueId"], b"")
                    found.append(DeliveredFile(p.chat, a.get("name", ""), data, False, p.text))
        return found

    def group(self, text: str, *, mentioned: bool) -> None:
        self._post(self.fake.message(CHANNEL, OWNER, text, mention=mentioned))

    def mention_after(self, before: str, text: str) -> None:
        self._post(self.fake.message(CHANNEL, OWNER, text, mention=True, before=before))

    def own_message(self, text: str) -> None:
        self._post(self.fake.message(PERSONAL, OWNER, text, bot=True))

    def redeliver_last(self) -> None:
        assert self._last is not None
        self._post(self._last)

    def drop_connection(self) -> None:
        raise NotImplementedError(self.cannot["drop_connection"])

    def delivered(self) -> list[Delivered]:
        """The bot's messages without a file (an inline image, a consent or a file card)."""
        return [
            Delivered(chat=p.chat, text=p.text, thread=p.thread)
            for p in self.fake.messages()
            if not any(
                a.get("contentType") in (CONSENT, SENT_FILE)
                or (a.get("contentUrl") or "").startswith("data:")
                for a in p.attachments
            )
        ]

    def shown(self) -> list[str]:
        return [p.shown for p in self.fake.messages() if p.chat == PERSONAL]

    def update_times(self) -> list[float]:
        posted = [p for p in self.fake.messages() if p.chat == PERSONAL]
        return sorted([p.at for p in posted] + [when for p in posted for when, _ in p.edits])

    def typing_shown(self) -> bool:
        return any(p.kind == "typing" and p.chat == PERSONAL for p in self.fake.posted)

    def close(self) -> None:
        self.fake.stop()
