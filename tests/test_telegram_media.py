"""Files through `rousseau run` on Telegram: python-telegram-bot's getFile and the file
download path against the fake Bot API, the blob store and the workspace copy, the model's
request (the OpenAI SDK to the fake model), and the limits."""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import signal
import subprocess

from rousseau.daemon import VOICE_HINT
from tests.fakes.llm import (
    FakeLLMServer,
    JSONReply,
    Recorded,
    Reply,
    openai_completion,
    openai_stream,
)
from tests.fakes.telegram import PHOTO, FakeTelegram
from tests.faults.support import edit_config, wait_until
from tests.helpers import ROUSSEAU
from tests.test_daemon import Daemon, daemon, llm, model  # noqa: F401 - fixtures

PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n"
TODAY = datetime.date.today().isoformat()


def user_content(server: FakeLLMServer) -> list[object] | str:
    [request] = [r for r in server.posts() if r.path.endswith("/chat/completions")]
    return request.body["messages"][-1]["content"]


def test_a_photo_with_a_caption_reaches_the_model_as_an_image(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    daemon.start()
    telegram.push("what is on this receipt?", attach=("photo", PHOTO, "", "image/jpeg"))
    [sent] = telegram.wait_sent(1)
    assert sent.text.startswith("echo: ")
    assert user_content(llm) == [
        {"type": "text", "text": "what is on this receipt?"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(PHOTO).decode()},
        },
    ]
    assert telegram.downloads == ["photo-2"]  # the largest size, once
    sha = hashlib.sha256(PHOTO).hexdigest()
    media = daemon.config.parent / "media"
    assert (media / sha[:2] / sha).read_bytes() == PHOTO
    [saved] = (daemon.config.parent / "ws" / "inbox" / TODAY).iterdir()
    assert saved.read_bytes() == PHOTO


def test_a_photo_alone_is_answered(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    daemon.start()
    telegram.push("", attach=("photo", PHOTO, "", "image/jpeg"))
    telegram.wait_sent(1)
    content = user_content(llm)
    assert isinstance(content, list) and [p["type"] for p in content] == ["image_url"]


def test_a_pdf_lands_in_the_workspace_and_the_model_is_told_where(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    daemon.start()
    telegram.push("summarise", attach=("document", PDF, "../../q3 report.pdf", "application/pdf"))
    telegram.wait_sent(1)
    saved = f"inbox/{TODAY}/q3 report.pdf"
    assert (daemon.config.parent / "ws" / saved).read_bytes() == PDF
    assert user_content(llm) == [
        {"type": "text", "text": f"summarise\n[file: q3 report.pdf, 48 bytes, saved as {saved}]"}
    ]


def test_a_file_over_the_limit_gets_a_polite_reply_and_no_model_call(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(daemon, lambda c: c.update(media={"max_bytes": 100}))
    daemon.start()
    telegram.push("read this", attach=("document", PDF * 3, "big.pdf", "application/pdf"))
    [sent] = telegram.wait_sent(1)
    assert sent.text == "Sorry, big.pdf is too large (0.0 MB); the limit is 0.0 MB."
    assert telegram.downloads == []  # refused on what the Bot API said, before downloading
    assert not [r for r in llm.posts() if r.path.endswith("/chat/completions")]


def test_a_file_the_bot_api_will_not_give_is_noted_and_the_message_answered(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    daemon.start()
    update = telegram.push("look", attach=("document", PDF, "gone.pdf", "application/pdf"))
    telegram.files.pop(update["message"]["document"]["file_id"])
    telegram.wait_sent(1)
    assert user_content(llm) == "look\n[a file was attached but could not be downloaded]"


PNG = b"\x89PNG\r\n\x1a\n" + bytes(100)
CSV = b"month,total\n11,42\n"


def send_files_then_answer(recorded: Recorded) -> Reply:
    """Asked for files: send chart.png and table.csv, then answer."""
    if recorded.body["messages"][-1]["role"] == "tool":
        return openai_stream(openai_completion("Here they are."))
    calls = [
        ("send_file", {"path": "chart.png", "caption": "November"}),
        ("send_file", {"path": "table.csv"}),
    ]
    return openai_stream(openai_completion(tool_calls=calls))


def test_send_file_delivers_an_image_as_a_photo_and_a_csv_as_a_document(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(
        daemon,
        lambda c: c["agent"].update(approver={"allow": [{"tool": "send_file"}]}),
    )
    (daemon.config.parent / "ws").mkdir()
    (daemon.config.parent / "ws" / "chart.png").write_bytes(PNG)
    (daemon.config.parent / "ws" / "table.csv").write_bytes(CSV)
    llm.responder = send_files_then_answer
    daemon.start()
    telegram.push("send me the chart and the table")
    answer, photo, document = telegram.wait_sent(3)
    assert answer.text == "Here they are."
    assert (photo.params["_kind"], photo.text, photo.params["_data"]) == ("photo", "November", PNG)
    assert (document.params["_kind"], document.params["_filename"]) == ("document", "table.csv")
    assert document.params["_data"] == CSV and document.text == ""


OGG = b"OggS" + bytes(200)


def transcribing(recorded: Recorded) -> Reply:
    """A whisper server at /audio/transcriptions beside the echoing chat model."""
    if recorded.path.endswith("/audio/transcriptions"):
        return JSONReply({"text": "remind me to buy milk"})
    return model(recorded)


def test_a_voice_note_is_transcribed_and_answered_from_the_transcript(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(
        daemon,
        lambda c: c.update(
            media={"transcription": {"base_url": llm.url + "/v1", "model": "whisper-test"}}
        ),
    )
    llm.responder = transcribing
    daemon.start()
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    [sent] = telegram.wait_sent(1)
    [upload] = [r for r in llm.posts() if r.path.endswith("/audio/transcriptions")]
    assert "whisper-test" in upload.body["_raw"]
    assert user_content(llm) == [
        {
            "type": "text",
            "text": "[voice note, 0:03] remind me to buy milk\n"
            f"[audio: voice_1.ogg, 204 bytes, saved as inbox/{TODAY}/voice_1.ogg]",
        }
    ]
    assert sent.text.startswith("echo: [voice note, 0:03] remind me to buy milk")


def test_without_transcription_the_model_is_told_a_voice_note_came(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    daemon.start()
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    answer, hint = telegram.wait_sent(2)
    assert user_content(llm) == [
        {
            "type": "text",
            "text": "[voice note, 0:03] (not transcribed: media.transcription is not set up)\n"
            f"[audio: voice_1.ogg, 204 bytes, saved as inbox/{TODAY}/voice_1.ogg]",
        }
    ]
    assert answer.text.startswith("echo: [voice note")
    assert hint.text == VOICE_HINT  # the sender is told, once per chat
    telegram.push("", attach=("voice", OGG, "", "audio/ogg"))
    telegram.push("and now in writing")
    *_, last = telegram.wait_sent(4)
    assert last.text == "echo: and now in writing"
    assert [s.text for s in telegram.sent].count(VOICE_HINT) == 1


def test_a_strangers_file_is_never_downloaded(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    daemon.start()
    telegram.push(
        "hi", user_id=666, chat_id=666, attach=("document", PDF, "x.pdf", "application/pdf")
    )
    telegram.push(
        "hi", chat_id=-100, chat_type="supergroup", attach=("photo", PHOTO, "", "image/jpeg")
    )
    telegram.push("and you?")  # the owner, after both: once answered, both were handled
    [sent] = telegram.wait_sent(1)
    assert sent.text == "echo: and you?"
    assert telegram.downloads == []
    assert not (daemon.config.parent / "media").exists()


def send_chart_then_answer(recorded: Recorded) -> Reply:
    if recorded.body["messages"][-1]["role"] == "tool":
        return openai_stream(openai_completion("Here."))
    return openai_stream(openai_completion(tool_calls=[("send_file", {"path": "chart.png"})]))


def test_a_file_queued_before_a_kill_is_delivered_once_after_the_restart(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    edit_config(daemon, lambda c: c["agent"].update(approver={"allow": [{"tool": "send_file"}]}))
    (daemon.config.parent / "ws").mkdir()
    (daemon.config.parent / "ws" / "chart.png").write_bytes(PNG)
    llm.responder = send_chart_then_answer
    telegram.uploads_down = True  # the photo waits in the outbox, retried
    daemon.start()
    telegram.push("the chart, please")
    [answer] = telegram.wait_sent(1)
    assert answer.text == "Here."
    assert wait_until(lambda: telegram.call_counts["sendPhoto"] >= 1, timeout=10)
    daemon.stop(signal.SIGKILL, timeout=10)

    telegram.uploads_down = False
    daemon.start()
    answer, photo = telegram.wait_sent(2)
    assert (photo.params["_kind"], photo.params["_data"]) == ("photo", PNG)
    assert daemon.stop(signal.SIGTERM, timeout=30) == 0
    assert [s.text for s in telegram.sent] == ["Here.", ""]  # each once
    assert len([r for r in llm.posts() if r.path.endswith("/chat/completions")]) == 2


def test_session_show_counts_and_names_the_files(
    daemon: Daemon,  # noqa: F811
    telegram: FakeTelegram,
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    daemon.start()
    telegram.push("this one", attach=("photo", PHOTO, "", "image/jpeg"))
    telegram.wait_sent(1)
    assert daemon.stop(signal.SIGTERM, timeout=30) == 0
    cli = [*ROUSSEAU, "--config", str(daemon.config)]
    env = {"PATH": os.environ["PATH"], "HOME": str(daemon.config.parent)}
    listed = subprocess.run([*cli, "session", "list"], env=env, capture_output=True, text=True)
    session_id = listed.stdout.splitlines()[1].split()[0]
    shown = subprocess.run(
        [*cli, "session", "show", session_id], env=env, capture_output=True, text=True
    ).stdout
    saved = f"inbox/{TODAY}/photo_1.jpg"
    assert f"user: [photo: photo_1.jpg, {len(PHOTO)} bytes, saved as {saved}]" in shown
    assert "-- 2 messages; 1 file; tokens:" in shown
