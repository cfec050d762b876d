"""The Signal adapter's harness: the real JSON-RPC protocol against a fake signal-cli."""

from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rousseau.transports.base import Transport
from rousseau.transports.signal import GROUP_PREFIX, MAX_LENGTH, SignalTransport
from tests.fakes.files import Declared, stated
from tests.transports.conformance import Delivered, DeliveredFile, File

FAKE = Path(__file__).parent.parent / "fakes" / "signal_cli.py"
ACCOUNT = "+15550000000"
GROUP = "Z3JvdXAtb25l"


class SignalHarness:
    name = "signal"
    owner = "+15551230001"
    stranger = "+15556660666"
    dm_chat = owner
    group_chat = f"{GROUP_PREFIX}{GROUP}"
    measure = staticmethod(len)
    limit = MAX_LENGTH
    largest = 64_000_000

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="signal-"))
        self.binary = self.dir / "signal-cli"
        script = f"import runpy\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n"
        self.binary.write_text(f"#!{sys.executable}\n{script}")
        self.binary.chmod(self.binary.stat().st_mode | stat.S_IXUSR)
        self.control = str(self.dir / "control.sock")
        self.log = self.dir / "requests.jsonl"
        os.environ["FAKE_SIGNAL_CONTROL"] = self.control
        os.environ["FAKE_SIGNAL_LOG"] = str(self.log)
        self._clock = itertools.count(int(time.time() * 1000))
        self._last: dict[str, Any] | None = None

    def transport(self) -> Transport:
        return SignalTransport(
            ACCOUNT, binary=str(self.binary), extra_args=["--config", str(self.dir / "data")]
        )

    def _inject(self, command: dict[str, Any]) -> None:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                    sock.connect(self.control)
                    sock.sendall((json.dumps(command) + "\n").encode())
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # signal-cli is being restarted

    def envelope(
        self,
        text: str,
        *,
        source: str,
        group: bool = False,
        mentioned: bool = False,
        before: str = "",
    ) -> dict[str, Any]:
        """What signal-cli prints for a message; a mention of the bot follows `before`, as
        U+FFFC with its place in UTF-16 code units (signal-cli's Java strings count so)."""
        ts = next(self._clock)
        data: dict[str, Any] = {"timestamp": ts, "message": text, "expiresInSeconds": 0}
        if group:
            data["groupInfo"] = {"groupId": GROUP, "type": "DELIVER"}
        if mentioned:
            data["message"] = f"{before}\ufffc {text}"
            start = len(before.encode("utf-16-le")) // 2
            data["mentions"] = [{"name": ACCOUNT, "number": ACCOUNT, "start": start, "length": 1}]
        return {
            "envelope": {
                "source": source,
                "sourceNumber": source,
                "sourceName": "Ann",
                "sourceDevice": 1,
                "timestamp": ts,
                "dataMessage": data,
            },
            "account": ACCOUNT,
        }

    def dm(self, text: str, *, sender: str | None = None) -> None:
        self._last = self.envelope(text, source=sender or self.owner)
        self._inject(self._last)

    def dm_file(
        self, text: str, file: File, *, sender: str | None = None, declared: Declared = ...
    ) -> None:
        """As signal-cli prints a message whose attachment it has saved in its data folder
        (`attachments/ID`); no text is `"message": null`; its size the `declared` one
        (null for None)."""
        envelope = self.envelope(text, source=sender or self.owner)
        data = envelope["envelope"]["dataMessage"]
        attachment_id = f"{data['timestamp']}-{file.name.rsplit('.', 1)[-1]}"
        folder = self.dir / "data" / "attachments"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / attachment_id).write_bytes(file.data)
        data["message"] = text or None
        data["attachments"] = [
            {
                "contentType": file.media_type,
                "filename": None if file.voice else file.name,
                "id": attachment_id,
                "size": stated(file.data, declared),
                "width": None,
                "height": None,
                "caption": None,
                "uploadTimestamp": data["timestamp"],
            }
        ]
        self._last = envelope
        self._inject(envelope)

    def dm_file_declaring(self, text: str, file: File, declared: int | None) -> None:
        self.dm_file(text, file, declared=declared)

    def served_whole(self) -> bool | None:
        return None  # a file signal-cli saved: how much of it was read is not seen

    def group(self, text: str, *, mentioned: bool) -> None:
        self._last = self.envelope(text, source=self.owner, group=True, mentioned=mentioned)
        self._inject(self._last)

    def mention_after(self, before: str, text: str) -> None:
        self._last = self.envelope(
            text, source=self.owner, group=True, mentioned=True, before=before
        )
        self._inject(self._last)

    def own_message(self, text: str) -> None:
        self._inject(self.envelope(text, source=ACCOUNT))

    def redeliver_last(self) -> None:
        assert self._last is not None
        self._inject(self._last)

    def drop_connection(self) -> None:
        self._inject({"exit": 1})

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def _sends(self) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for r in self.requests():
            if r["method"] == "send":
                p = r["params"]
                chat = f"{GROUP_PREFIX}{p['groupId']}" if "groupId" in p else p["recipient"][0]
                out.append((chat, p))
        return out

    def delivered(self) -> list[Delivered]:
        return [
            Delivered(chat=chat, text=p["message"])
            for chat, p in self._sends()
            if not p.get("attachments")
        ]

    def files_delivered(self) -> list[DeliveredFile]:
        """Attachments sent as data URIs (`data:TYPE;filename=NAME;base64,DATA`)."""
        out = []
        for chat, p in self._sends():
            for uri in p.get("attachments") or []:
                header, _, encoded = uri.partition(",")
                media_type, *options = header.removeprefix("data:").split(";")
                assert options[-1] == "base64", uri[:80]
                names = [o.removeprefix("filename=") for o in options if o.startswith("filename=")]
                out.append(
                    DeliveredFile(
                        chat=chat,
                        name=names[0] if names else "",
                        data=base64.b64decode(encoded),
                        inline=media_type.startswith("image/"),  # Signal shows images inline
                        caption=p["message"],
                        voice=p.get("voiceNote") is True,
                    )
                )
        return out

    def typing_shown(self) -> bool:
        return any(r["method"] == "sendTyping" for r in self.requests())

    def close(self) -> None:
        pass
