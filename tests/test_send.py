"""`rousseau send`: one message through the outbox, delivered by the running daemon or,
with none running, by the command itself (python-telegram-bot against the fake Bot API)."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.llm import FakeLLMServer
from tests.fakes.telegram import FakeTelegram
from tests.faults.support import edit_config, wait_until
from tests.test_daemon import Daemon, llm
from tests.test_one_daemon import rousseau

__all__ = ["llm"]  # a fixture


def test_with_no_daemon_it_sends_at_once(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    setup = Daemon(tmp_path, telegram, llm)
    sent = rousseau(setup, "send", "telegram:42", "disk almost full")
    assert sent.returncode == 0, sent.stderr
    assert "sent 1 part(s) to telegram:42" in sent.stdout
    assert [(s.chat_id, s.text) for s in telegram.sent] == [(42, "disk almost full")]

    again = rousseau(setup, "send", "telegram:42", "x" * 5000)  # over Telegram's 4096
    assert again.returncode == 0, again.stderr
    assert "sent 2 part(s)" in again.stdout
    assert "".join(s.text for s in telegram.sent[1:]) == "x" * 5000


def test_with_a_daemon_running_it_delivers_the_message(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    daemon = Daemon(tmp_path, telegram, llm).start()
    try:
        sent = rousseau(daemon, "send", "telegram:43", "backup done")
        assert sent.returncode == 0, sent.stderr
        assert "the running daemon delivers them" in sent.stdout
        assert wait_until(lambda: len(telegram.sent) == 1, timeout=20)
    finally:
        daemon.stop()
    assert [(s.chat_id, s.text) for s in telegram.sent] == [(43, "backup done")]


def test_a_rejected_send_stays_queued_for_the_daemon(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    setup = Daemon(tmp_path, telegram, llm)
    edit_config(setup, lambda c: c.update(send_timeout="1s"))
    telegram.flood_once = 60  # the first sendMessage: wait a minute (429), longer than that
    refused = rousseau(setup, "send", "telegram:42", "retry me")
    assert refused.returncode == 1
    assert "stays queued" in refused.stderr and refused.stderr.count("\n") == 1
    daemon = setup.start()
    try:
        assert wait_until(lambda: len(telegram.sent) == 1, timeout=20)
    finally:
        daemon.stop()
    assert [s.text for s in telegram.sent] == ["retry me"]


def test_bad_targets_are_one_line(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    setup = Daemon(tmp_path, telegram, llm)
    for target, says in [
        ("telegram:@someone", "a chat id"),
        ("fax:42", "unknown transport"),
        ("slack:C0123ABC", "slack is not configured"),
    ]:
        out = rousseau(setup, "send", target, "hi")
        assert out.returncode != 0 and says in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert telegram.sent == []


def test_a_file_goes_with_its_caption(
    tmp_path: Path, telegram: FakeTelegram, llm: FakeLLMServer
) -> None:
    setup = Daemon(tmp_path, telegram, llm)
    report = tmp_path / "report.csv"
    report.write_bytes(b"day,total\nmon,3\n")
    sent = rousseau(setup, "send", "telegram:42", "Monday's numbers", "--file", str(report))
    assert sent.returncode == 0, sent.stderr
    [document] = telegram.sent
    assert (document.params["_kind"], document.params["_filename"]) == ("document", "report.csv")
    assert (document.text, document.params["_data"]) == ("Monday's numbers", report.read_bytes())
    missing = rousseau(setup, "send", "telegram:42", "--file", str(tmp_path / "nope.pdf"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    assert missing.stderr.count("\n") == 1
