"""The Google Chat adapter's harness: the real adapter (google-auth and the Chat API) against
the fake Google, whose Chat posts signed events to the daemon's endpoint."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, ClassVar

from rousseau.transports.base import Transport
from rousseau.transports.googlechat import MAX_LENGTH, GoogleChatTransport
from tests.fakes.googlechat import (
    APP_USER,
    DM_SPACE,
    OWNER,
    PROJECT,
    ROOM,
    STRANGER,
    STRANGER_SPACE,
    FakeGoogleChat,
)
from tests.helpers import free_port
from tests.transports.conformance import Delivered, DeliveredFile, File


class GoogleChatHarness:
    name = "googlechat"
    owner = OWNER
    stranger = STRANGER
    dm_chat = DM_SPACE
    group_chat = ROOM
    measure = staticmethod(len)
    limit = MAX_LENGTH
    cannot: ClassVar[dict[str, str]] = {
        "drop_connection": "Chat posts each event: there is no connection to drop",
    }
    no_typing = "Chat shows no typing for apps"
    no_files_out = "a Chat app cannot upload files with its own credentials"

    def __init__(self) -> None:
        self.fake = FakeGoogleChat().start()
        self.folder = Path(tempfile.mkdtemp(prefix="rousseau-googlechat-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/googlechat"
        self._last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        import json

        return GoogleChatTransport(
            json.loads(self.fake.credentials(self.folder).read_text()),
            audience=PROJECT,
            listen=f"127.0.0.1:{self.port}",
            api_base=self.fake.url,
            certs_url=f"{self.fake.url}/certs",
        )

    def _post(self, event: dict[str, Any]) -> None:
        self._last = event
        status = self.fake.post(self.url, event)
        assert status == 200, status

    def dm(self, text: str, *, sender: str | None = None) -> None:
        if sender == self.stranger:
            self._post(self.fake.message(STRANGER_SPACE, STRANGER, text))
        else:
            self._post(self.fake.message(DM_SPACE, OWNER, text))

    def dm_file(self, text: str, file: File, *, sender: str | None = None) -> None:
        space, who = (STRANGER_SPACE, STRANGER) if sender == self.stranger else (DM_SPACE, OWNER)
        upload = [(file.name, file.data, file.media_type)]
        self._post(self.fake.message(space, who, text, files=upload))

    def files_delivered(self) -> list[DeliveredFile]:
        return []  # see no_files_out

    def group(self, text: str, *, mentioned: bool) -> None:
        self._post(self.fake.message(ROOM, OWNER, text, mention=mentioned))

    def mention_after(self, before: str, text: str) -> None:
        self._post(self.fake.message(ROOM, OWNER, text, mention=True, before=before))

    def own_message(self, text: str) -> None:
        event = self.fake.message(DM_SPACE, APP_USER, text)
        event["message"]["sender"]["type"] = "BOT"
        self._post(event)

    def redeliver_last(self) -> None:
        assert self._last is not None
        self._post(self._last)

    def drop_connection(self) -> None:
        raise NotImplementedError(self.cannot["drop_connection"])

    def delivered(self) -> list[Delivered]:
        return [
            Delivered(chat=s.space, text=s.text, thread=s.thread if s.space == ROOM else None)
            for s in self.fake.sent
        ]

    def shown(self) -> list[str]:
        return [s.shown for s in self.fake.sent if s.space == DM_SPACE]

    def update_times(self) -> list[float]:
        sent = [s for s in self.fake.sent if s.space == DM_SPACE]
        return sorted([s.at for s in sent] + [when for s in sent for when, _ in s.edits])

    def close(self) -> None:
        self.fake.stop()
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
