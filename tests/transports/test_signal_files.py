"""Signal attachments are read only from signal-cli's own attachments folder."""

from __future__ import annotations

from pathlib import Path

from rousseau.media import BlobStore, MediaIntake
from rousseau.transports.signal import SignalTransport


def envelope(attachment_id: str, text: str | None = None) -> dict[str, object]:
    attachment = {"contentType": "text/plain", "filename": "x.txt", "id": attachment_id}
    data = {"timestamp": 1, "message": text, "attachments": [attachment]}
    return {"source": "+15551230001", "timestamp": 1, "dataMessage": data}


def test_an_attachment_id_that_is_a_path_is_never_read(tmp_path: Path) -> None:
    transport = SignalTransport("+15550000000", extra_args=["--config", str(tmp_path / "d")])
    transport.bind_media(MediaIntake(blobs=BlobStore(folder=tmp_path / "m"), workspace=tmp_path))
    (tmp_path / "secret").write_text("do not read")
    assert transport.attachments == tmp_path / "d" / "attachments"
    for hostile in ("../../secret", "/etc/passwd", "..", ""):
        assert transport._normalise(envelope(hostile)) is None  # nothing else to answer
        found = transport._normalise(envelope(hostile, "hi"))
        assert found is not None and found[1] == []  # the text is answered, the file left


def test_the_data_folder_follows_the_config_argument(tmp_path: Path) -> None:
    assert SignalTransport("+1", extra_args=[f"--config={tmp_path}"]).attachments == (
        tmp_path / "attachments"
    )
    default = SignalTransport("+1").attachments
    assert default.parts[-2:] == ("signal-cli", "attachments")
