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
        # money too: gpt-4.1-mini's list price for the fake model's 10 + 5 tokens a call
        spent = re.search(
            r"Spent today \(\d{4}-\d\d-\d\d\): <strong>\$0\.0000(\d+)</strong>", usage
        )
        assert spent is not None and int(spent.group(1)) > 0, usage
        assert re.search(
            r'<td data-label="Person">telegram:\d+</td><td data-label="Agent">default', usage
        )
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


def test_every_profile_is_shown_escaped_edited_and_deleted(
    web_daemon: WebDaemon,
) -> None:
    telegram = web_daemon.telegram
    before = len(telegram.sent)
    telegram.push("remember <b>keeps</b> bees on the roof")
    [said] = telegram.wait_sent(before + 1)[before:]
    assert "the tool said: added: <b>keeps</b> bees on the roof" in said.text
    with web_daemon.logged_in() as client:
        page = client.get("/memory").text
        row = re.search(r'<tr data-entry="(\d+)">(.*?)</tr>', page, re.S)
        assert row is not None, page
        entry, cells = row.groups()
        assert f'<td data-label="Person">telegram:{OWNER_CHAT}</td>' in cells
        assert '<td data-label="Agent">default</td>' in cells
        assert '<td data-label="#">1</td>' in cells
        assert "&lt;b&gt;keeps&lt;/b&gt; bees on the roof" in cells and "<b>" not in cells
        other = client.get("/memory", params={"person": "telegram:9"}).text
        assert "data-entry" not in other and "No profiles kept that match." in other
        edit = f"/memory/{entry}/edit"
        refused = client.post(edit, data={"text": "keeps wasps"})  # no CSRF token: nothing
        assert refused.status_code == 403 and "wasps" not in client.get("/memory").text
        edited = client.post(edit, data={"csrf": client.csrf, "text": " keeps  bees and wasps "})
        assert edited.status_code == 303 and "changed" in edited.headers["location"]
        assert 'value="keeps bees and wasps"' in client.get("/memory").text
        too_long = client.post(edit, data={"csrf": client.csrf, "text": "x" * 5000})
        assert "would+pass+2%2C000+characters" in too_long.headers["location"]
        assert 'value="keeps bees and wasps"' in client.get("/memory").text
        refused = client.post(f"/memory/{entry}/delete")  # no CSRF token: nothing happens
        assert refused.status_code == 403 and "bees" in client.get("/memory").text
        telegram.push("/memory")
        assert "keeps bees and wasps" in telegram.wait_sent(before + 2)[-1].text
        deleted = client.post(f"/memory/{entry}/delete", data={"csrf": client.csrf})
        assert deleted.status_code == 303 and "deleted" in deleted.headers["location"]
        assert "bees" not in client.get("/memory").text
    telegram.push("/memory")
    assert telegram.wait_sent(before + 3)[-1].text == "I keep nothing about you yet."
