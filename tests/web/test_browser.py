"""The web face in a real Chromium (Debian's, driven by Playwright) against `rousseau run`
with the fake Telegram and the fake model: what an owner does from a phone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.support import wait_until
from tests.web.conftest import OWNER_CHAT, PASSWORD, PHONE, WebDaemon, in_view, log_in

STRANGER = 777


@pytest.fixture
def page(browser: Any, web_daemon: WebDaemon) -> Iterator[Any]:
    context = browser.new_context(base_url=web_daemon.url, viewport=PHONE)
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    yield opened
    context.close()


def test_log_in_and_see_telegram_connected(page: Any) -> None:
    log_in(page)
    row = page.locator('[data-transport="telegram"]')
    assert row.locator(".ok").inner_text() == "connected"


def test_a_strangers_pairing_code_appears_live_and_once_approved_they_are_answered(
    page: Any, web_daemon: WebDaemon
) -> None:
    telegram = web_daemon.telegram
    log_in(page)
    before = len(telegram.sent)
    telegram.push("hello?", chat_id=STRANGER, user_id=STRANGER)
    told = telegram.wait_sent(before + 1)[-1]
    code = re.search(r"\b([A-Z2-9]{6,8})\b", told.text)
    assert code is not None and told.chat_id == STRANGER, told.text
    row = page.locator(f'[data-live="pairings"] [data-code="{code.group(1)}"]')
    row.wait_for()  # came in live: the page was not reloaded
    row.get_by_role("button", name="Approve").click()
    page.wait_for_url(re.compile(r"/pairings\?note=approved"))
    telegram.push("and now?", chat_id=STRANGER, user_id=STRANGER)
    answered = telegram.wait_sent(before + 2)[-1]
    assert answered.chat_id == STRANGER and answered.text.startswith("echo: and now?")


def test_a_tool_approval_from_telegram_is_approved_live_from_the_page(
    page: Any, web_daemon: WebDaemon
) -> None:
    telegram = web_daemon.telegram
    log_in(page)
    page.goto("/approvals")
    before = len(telegram.sent)
    telegram.push("use bash echo approve-me")
    card = page.locator('[data-live="approvals"] .card')
    card.wait_for()
    assert "echo approve-me" in card.locator("pre").inner_text()
    card.get_by_role("button", name="Approve").click()
    assert wait_until(
        lambda: any(s.text == "the tool said: approve-me" for s in telegram.sent[before:]),
        timeout=20,
    ), [s.text for s in telegram.sent[before:]]
    asked = [s for s in telegram.sent[before:] if s.text.startswith("Approve bash?")]
    assert asked and asked[0].chat_id == OWNER_CHAT  # the chat was asked too, as before


def test_the_owner_in_the_web_chat_approves_a_tool_call_from_its_card(
    page: Any, web_daemon: WebDaemon
) -> None:
    log_in(page)
    page.goto("/chat")
    page.get_by_label("Message").fill("use bash echo approve-me")
    page.get_by_role("button", name="Send").click()
    card = page.locator(".conversation .assistant.card").last
    card.wait_for()  # the question, as a card with its answers as buttons
    assert card.locator("code").first.inner_text() == "rousseau audit"  # no raw backticks
    assert "`" not in card.locator(".text").inner_text()
    card.get_by_role("button", name="Approve").click()  # the owner logged in is an owner
    done = page.locator(".conversation .assistant", has_text="the tool said: approve-me")
    try:
        done.wait_for()
    except Exception:
        said = page.locator(".conversation").inner_text()
        raise AssertionError(f"{said}\n{web_daemon.log.read_text()[-3000:]}") from None
    assert "Only an owner" not in page.locator(".conversation").inner_text()
    assert done.is_visible() and in_view(page, done)  # not under the composer


def test_a_cron_job_is_disabled_and_run_now(page: Any, web_daemon: WebDaemon) -> None:
    telegram = web_daemon.telegram
    log_in(page)
    page.goto("/cron")
    page.get_by_label("Name").fill("morning")
    page.get_by_label("Schedule").fill("0 8 * * *")
    page.get_by_label("Prompt").fill("good morning report")
    page.get_by_label("Deliver to").fill(f"telegram:{OWNER_CHAT}")
    page.get_by_role("button", name="Add").click()
    job = page.locator('[data-job="morning"]')
    job.get_by_role("button", name="Disable").click()
    assert "(disabled)" in job.inner_text()
    assert "disabled" in web_daemon.rousseau("cron", "list").stdout
    before = len(telegram.sent)
    job.get_by_role("button", name="Run now").click()
    assert wait_until(
        lambda: any("good morning report" in s.text for s in telegram.sent[before:]), timeout=20
    ), [s.text for s in telegram.sent[before:]]


def test_a_web_chat_message_streams_its_reply(page: Any) -> None:
    log_in(page)
    page.goto("/chat")
    page.get_by_label("Message").fill("slowly please")
    page.get_by_role("button", name="Send").click()
    writing = page.locator(".conversation .assistant.writing")
    writing.wait_for()  # a preview, before the answer was whole
    partial = writing.inner_text()
    answer = " ".join(f"word{i}" for i in range(40))
    final = page.locator(".conversation .assistant:not(.writing)", has_text="word39")
    final.last.wait_for()  # (earlier tests' answers are in the owner's conversation too)
    assert final.last.inner_text() == answer
    assert partial != answer and answer.startswith(partial)
    page.reload()  # the conversation is a session: it is there after a reload
    assert page.locator(".conversation .assistant").last.inner_text() == answer


def test_a_file_uploaded_in_the_web_chat_reaches_the_agent_and_the_workspace(
    page: Any, web_daemon: WebDaemon, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("the meeting moved to Thursday\n")
    log_in(page)
    page.goto("/chat")
    page.get_by_label("Message").fill("what does this file say?")
    page.get_by_label("Attach").set_input_files(str(notes))
    page.get_by_role("button", name="Send").click()
    answer = page.locator(".conversation .assistant:not(.writing)").last
    answer.wait_for()
    assert wait_until(lambda: "notes.txt" in answer.inner_text(), timeout=15), answer.inner_text()
    assert "what does this file say?" in answer.inner_text()
    saved = list((web_daemon.tmp / "ws").rglob("notes.txt"))
    assert saved and saved[0].read_text() == notes.read_text()


def test_a_voice_note_in_the_web_chat_is_answered_with_one_the_page_plays(
    page: Any, web_daemon: WebDaemon, tmp_path: Path
) -> None:
    """An audio file sent from the page is a voice note: the answer's text comes, then a
    spoken reply the page plays inline (its bytes OGG/Opus, served to this chat alone)."""
    import io

    av = pytest.importorskip("av", reason="PyAV (the voice extra) reads the voice notes")
    from tests.fakes.speech import tone

    note = tmp_path / "question.wav"
    note.write_bytes(tone(1.0))
    log_in(page)
    page.goto("/chat")
    page.get_by_label("Attach").set_input_files(str(note))
    page.get_by_role("button", name="Send").click()
    audio = page.locator(".conversation .assistant.voice audio")
    audio.wait_for()
    source = audio.get_attribute("src")
    assert source is not None and re.fullmatch(r"/chat/voice/[0-9a-f]{64}", source)
    texts = page.locator(".conversation .assistant:not(.voice)", has_text="question.wav")
    texts.last.wait_for()  # the text came too (echoed)
    played = page.request.get(source)
    assert played.status == 200 and played.headers["content-type"] == "audio/ogg"
    with av.open(io.BytesIO(played.body())) as heard:
        assert heard.streams.audio[0].codec_context.name == "opus"
    duration = page.evaluate(
        "async (a) => { const el = document.querySelector(a); if (isNaN(el.duration))"
        " await new Promise(r => el.addEventListener('loadedmetadata', r)); return el.duration; }",
        ".conversation .assistant.voice audio",
    )
    assert duration > 0.5  # Chromium read it as audio it can play
    assert web_daemon.speech is not None and len(web_daemon.speech.said) == 1
    # nobody else may fetch it: a stranger to the page gets nothing
    context = page.context.browser.new_context(base_url=web_daemon.url)
    refused = context.request.get(source, max_redirects=0)
    context.close()
    assert refused.status != 200


def test_a_wrong_password_is_refused_and_the_fifth_try_is_rate_limited(page: Any) -> None:
    # Last in this module: the four failures hold this client address for a minute.
    page.goto("/login")
    for i in range(4):
        page.get_by_label("Password").fill(f"wrong {i}")
        page.get_by_role("button", name="Log in").click()
        assert page.get_by_role("alert").inner_text() == "Wrong name or password."
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    assert page.get_by_role("alert").inner_text() == "Too many tries: wait a minute."
    assert page.url.endswith("/login")
