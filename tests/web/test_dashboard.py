"""The dashboard's pages over HTTP, after real traffic through Telegram: sessions listed,
searched, read with their tool calls and deleted; the audit filtered; usage counted; a
transport's failure shown with its last error."""

from __future__ import annotations

import re

from tests.web.conftest import OWNER_CHAT, WebDaemon


def test_sessions_are_listed_searched_read_and_deleted(web_daemon: WebDaemon) -> None:
    telegram = web_daemon.telegram
    before = len(telegram.sent)
    telegram.push("please use bash echo dashboard-marmalade")
    telegram.wait_sent(before + 1)
    with web_daemon.logged_in() as client:
        listed = client.get("/sessions").text
        ids = re.findall(r'href="/sessions/([0-9a-f]+)"', listed)
        assert ids
        found = client.get("/sessions", params={"q": "marmalade"}).text
        [session_id] = set(re.findall(r'href="/sessions/([0-9a-f]+)"', found))
        page = client.get(f"/sessions/{session_id}").text
        assert "tool call: bash" in page and "echo dashboard-marmalade" in page
        assert "the tool said: dashboard-marmalade" in page
        audit = client.get("/audit", params={"session": session_id, "tool": "bash"}).text
        tool = '<td data-label="Tool">bash</td>'
        assert audit.count(tool) == 1 and "allow" in audit
        assert tool not in client.get("/audit", params={"tool": "read"}).text
        usage = client.get("/usage").text
        day = r'<td data-label="Day">\d{4}-\d\d-\d\d</td><td data-label="Sessions">\d+</td>'
        assert re.search(day + r'<td data-label="Tokens in">[1-9]', usage)
        deleted = client.post(f"/sessions/{session_id}/delete", data={"csrf": client.csrf})
        assert deleted.status_code == 303 and "deleted" in deleted.headers["location"]
        assert client.get(f"/sessions/{session_id}").status_code == 404
        assert session_id not in client.get("/sessions").text


def test_what_strangers_write_is_shown_escaped(web_daemon: WebDaemon) -> None:
    telegram = web_daemon.telegram
    before = len(telegram.sent)
    telegram.push("<script>alert(1)</script> hi", chat_id=OWNER_CHAT)
    telegram.wait_sent(before + 1)
    with web_daemon.logged_in() as client:
        found = client.get("/sessions", params={"q": "alert"}).text
        assert "<script>alert" not in found and "&lt;script&gt;alert" in found
