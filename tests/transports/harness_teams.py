"""The Teams adapter's harness: the real adapter (Microsoft's Teams SDK) against the fake
Teams, which posts signed activities to the daemon's messaging endpoint."""

from __future__ import annotations

from typing import Any, ClassVar

from rousseau.transports.base import Transport
from rousseau.transports.teams import MAX_LENGTH, TeamsTransport
from tests.fakes.teams import (
    APP_ID,
    CHANNEL,
    OWNER,
    PASSWORD,
    PERSONAL,
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
    no_files_out = "a bot sends files through file consent cards and OneDrive, not built yet"

    def __init__(self) -> None:
        self.fake = FakeTeams().start()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}/api/messages"
        self._last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        return TeamsTransport(
            APP_ID,
            PASSWORD,
            listen=f"127.0.0.1:{self.port}",
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
        return []  # see no_files_out

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
        return [Delivered(chat=p.chat, text=p.text, thread=p.thread) for p in self.fake.messages()]

    def shown(self) -> list[str]:
        return [p.shown for p in self.fake.messages() if p.chat == PERSONAL]

    def update_times(self) -> list[float]:
        posted = [p for p in self.fake.messages() if p.chat == PERSONAL]
        return sorted([p.at for p in posted] + [when for p in posted for when, _ in p.edits])

    def typing_shown(self) -> bool:
        return any(p.kind == "typing" and p.chat == PERSONAL for p in self.fake.posted)

    def close(self) -> None:
        self.fake.stop()
