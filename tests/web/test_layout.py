"""The web face's layout in a real Chromium at a desktop's width and a phone's (1280 and 390
pixels), measured: no page scrolls sideways, tables become cards whose cells keep their
column's name, the menu folds away, the newest chat message stays above the composer.

Every page is saved at both widths when ROUSSEAU_SCREENSHOTS is set (web-PAGE-WIDTH.png)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faults.support import wait_until
from tests.web.conftest import (
    DESKTOP,
    OWNER_CHAT,
    PHONE,
    WebDaemon,
    in_view,
    log_in,
    shot,
)

WIDTHS = [pytest.param(DESKTOP, id="1280"), pytest.param(PHONE, id="390")]
STRANGER = 778
NOTES = 12
"""Web chat messages sent before the tests: a history taller than either window."""

PAGES = [
    *("", "sessions", "session", "memory", "approvals", "pairings", "cron", "audit", "usage"),
    "chat",
]
"""The owner's pages ("" is the overview; "session" is one conversation with a tool call)."""


@pytest.fixture(scope="module")
def seeded(web_daemon: WebDaemon) -> dict[str, str]:
    """Something on every page: Telegram sessions with a tool call run and one waiting for
    approval, a profile entry, a stranger's pairing code, a cron job, a long web chat.
    Returns the paths of the owner's pages by name."""
    telegram = web_daemon.telegram
    telegram.push("use bash echo hello from a phone")
    assert wait_until(lambda: any(s.text.startswith("the tool said") for s in telegram.sent), 20)
    telegram.push("remember likes the layout of this page to be tidy on a phone")
    assert wait_until(lambda: any("added: likes the layout" in s.text for s in telegram.sent), 20)
    telegram.push("hello?", chat_id=STRANGER, user_id=STRANGER)
    assert wait_until(lambda: any(s.chat_id == STRANGER for s in telegram.sent), 20)
    with web_daemon.logged_in() as client:
        added = client.post(
            "/cron/add",
            data={
                "csrf": client.csrf,
                "name": "morning-report",
                "schedule": "0 8 * * *",
                "prompt": "good morning report",
                "to": f"telegram:{OWNER_CHAT}",
            },
        )
        assert added.status_code == 303, added.text
        for i in range(1, NOTES + 1):
            said = client.post(
                "/chat/send",
                headers={"x-csrf-token": client.csrf},
                data={"text": f"note {i} on the plan"},
            )
            assert said.status_code == 200, said.text
        assert wait_until(lambda: f"echo: note {NOTES} on" in client.get("/chat").text, 30)
        sessions = client.get("/sessions").text
    found = re.search(r'href="(/sessions/[^"]+)">use bash', sessions)
    assert found is not None, sessions
    telegram.push("use bash echo approve-me")  # left waiting: the approvals page shows it
    assert wait_until(lambda: any(s.text.startswith("Approve bash?") for s in telegram.sent), 20)
    paths = {name: f"/{name}" for name in PAGES}
    paths[""] = "/"
    paths["session"] = found.group(1)
    return paths


@pytest.fixture(scope="module")
def owner(browser: Any, web_daemon: WebDaemon) -> dict[str, Any]:
    """The owner's login (cookies), made once for the module's pages."""
    context = browser.new_context(base_url=web_daemon.url)
    try:
        log_in(context.new_page())
        return dict(context.storage_state())
    finally:
        context.close()


def window(browser: Any, web_daemon: WebDaemon, size: dict[str, int], login: Any) -> Any:
    context = browser.new_context(base_url=web_daemon.url, viewport=size, storage_state=login)
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    return opened


@pytest.fixture(params=WIDTHS)
def size(request: pytest.FixtureRequest) -> dict[str, int]:
    return dict(request.param)


@pytest.fixture
def page(browser: Any, web_daemon: WebDaemon, owner: Any, size: dict[str, int]) -> Iterator[Any]:
    opened = window(browser, web_daemon, size, owner)
    yield opened
    opened.context.close()


@pytest.fixture
def stranger(browser: Any, web_daemon: WebDaemon, size: dict[str, int]) -> Iterator[Any]:
    """A window with no login."""
    opened = window(browser, web_daemon, size, None)
    yield opened
    opened.context.close()


SIDEWAYS = """() => {
  const wide = document.documentElement.scrollWidth - window.innerWidth;
  const scrollers = [...document.querySelectorAll("body *")].filter((e) => {
    const x = getComputedStyle(e).overflowX;
    return (x === "auto" || x === "scroll") && e.scrollWidth > e.clientWidth + 1;
  });
  const out = [...document.querySelectorAll("body *")].filter((e) => {
    const box = e.getBoundingClientRect();
    return e.checkVisibility() && box.width > 0 && box.right > window.innerWidth + 1;
  });
  return {wide, scrollers: scrollers.map((e) => e.outerHTML.slice(0, 120)),
          out: out.map((e) => e.outerHTML.slice(0, 120))};
}"""
"""How far the page reaches past the window's right edge; the elements that scroll sideways
inside it (a table in a scroll box hides its right columns); the elements shown that stick
out on the right."""

LABELS = """() => [...document.querySelectorAll("table")].flatMap((table) => {
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent.trim());
  return [...table.querySelectorAll("tbody tr")].flatMap((tr) =>
    [...tr.children].filter((td) => !td.hasAttribute("colspan")).map((td, i) => ({
      column: names[i],
      label: td.dataset.label,
      shown: getComputedStyle(td, "::before").content,
    })));
})"""
"""Each table cell's column header, its data-label, and the label its card shows."""


def sideways(page: Any) -> dict[str, Any]:
    return dict(page.evaluate(SIDEWAYS))


def check_fits(page: Any, name: str, size: dict[str, int]) -> None:
    """The page reaches no further than the window, and nothing in it scrolls sideways."""
    seen = sideways(page)
    assert seen["wide"] <= 0 and not seen["scrollers"] and not seen["out"], (name, seen)


def test_no_page_scrolls_sideways(
    page: Any, seeded: dict[str, str], size: dict[str, int], web_daemon: WebDaemon
) -> None:
    for name, path in seeded.items():
        page.goto(path)
        assert page.url.endswith(path), (name, page.url)  # logged in: no redirect to /login
        check_fits(page, name or "overview", size)
        shot(page, f"{name or 'overview'}-{size['width']}")


def test_the_login_and_link_pages_do_not_scroll_sideways(
    stranger: Any, size: dict[str, int], web_daemon: WebDaemon
) -> None:
    stranger.goto("/login")
    check_fits(stranger, "login", size)
    shot(stranger, f"login-{size['width']}")
    made = web_daemon.rousseau("web", "link")
    assert made.returncode == 0, made.stderr
    link = re.search(r"/login/link\?token=\S+", made.stdout)
    assert link is not None, made.stdout
    stranger.goto(link.group(0))
    assert stranger.get_by_role("button", name="Log in as the owner").is_visible()
    check_fits(stranger, "link", size)
    shot(stranger, f"link-{size['width']}")


def test_on_a_phone_each_table_row_is_a_card_whose_cells_name_their_column(
    browser: Any, web_daemon: WebDaemon, owner: Any, seeded: dict[str, str]
) -> None:
    phone = window(browser, web_daemon, PHONE, owner)
    desktop = window(browser, web_daemon, DESKTOP, owner)
    for name in ("", "sessions", "memory", "pairings", "cron", "audit", "usage"):
        for opened in (phone, desktop):
            opened.goto(seeded[name])
        cells = phone.evaluate(LABELS)
        assert cells, name  # every one of these pages has a row
        for cell in cells:
            if cell["column"]:  # (the column of buttons has no name)
                assert cell["label"] == cell["column"], (name, cell)
                assert cell["shown"] == f'"{cell["column"]}"', (name, cell)
        rows = phone.locator("tbody tr").all()
        assert all(row.evaluate("r => getComputedStyle(r).display") == "block" for row in rows)
        shown = desktop.evaluate(LABELS)
        assert {c["shown"] for c in shown} <= {"none", "normal"}, (name, shown)  # a table
        assert desktop.locator("thead").first.is_visible(), name
    phone.context.close()
    desktop.context.close()


def test_the_sessions_tokens_and_delete_buttons_are_in_sight_on_a_phone(
    browser: Any, web_daemon: WebDaemon, owner: Any, seeded: dict[str, str]
) -> None:
    page = window(browser, web_daemon, PHONE, owner)
    page.goto("/sessions")
    rows = page.locator("tbody tr")
    assert rows.count() >= 2
    for row in rows.all():
        tokens = row.locator('[data-label="Tokens in / out"]')
        assert re.fullmatch(r"[\d,]+ / [\d,]+", tokens.inner_text().strip())
        delete = row.get_by_role("button", name="Delete")
        row.scroll_into_view_if_needed()
        for item in (tokens, delete):
            box = item.bounding_box()
            assert item.is_visible() and box is not None
            assert 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"], box
    page.context.close()


def test_the_menu_folds_on_a_phone_and_lies_open_on_a_desktop(
    page: Any, size: dict[str, int], seeded: dict[str, str]
) -> None:
    page.goto("/audit")
    header = page.locator("body > header").bounding_box()
    assert header is not None and header["height"] < 0.15 * size["height"], header
    sessions = page.locator("header nav").get_by_role("link", name="Sessions")
    menu = page.locator("header summary")
    if size["width"] == PHONE["width"]:
        assert menu.is_visible() and not sessions.is_visible()
        assert menu.inner_text().strip() == "Menu"
        menu.click()
        for link in page.locator("header nav a").all():  # each one whole in the window
            box = link.bounding_box()
            assert link.is_visible() and box is not None, link
            assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"], box
            assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"], box
        shot(page, "menu-390")
    else:
        assert not menu.is_visible() and sessions.is_visible()
    current = page.locator("header nav").get_by_role("link", name="Audit")
    assert current.get_attribute("aria-current") == "page"
    sessions.click()
    page.wait_for_url(re.compile(r"/sessions$"))
    assert sideways(page)["wide"] <= 0


def test_the_chat_opens_at_its_newest_message_and_keeps_it_above_the_composer(
    page: Any, size: dict[str, int], seeded: dict[str, str], web_daemon: WebDaemon
) -> None:
    page.goto("/chat")
    said = page.locator(".conversation > li")
    assert page.evaluate("document.documentElement.scrollHeight > window.innerHeight")
    assert in_view(page, said.last), said.last.inner_text()  # opened at its end

    question = f"where are we at {size['width']}?"
    page.get_by_label("Message").fill(question)
    page.get_by_role("button", name="Send").click()
    page.locator(".conversation .user", has_text=question).wait_for()
    assert in_view(page, said.last), said.last.inner_text()  # what was sent
    answer = page.locator(".conversation .assistant:not(.writing)", has_text=f"echo: {question}")
    answer.wait_for()
    assert in_view(page, answer) and in_view(page, said.last), said.last.inner_text()

    cards = page.locator(".conversation .assistant.card")
    asked = cards.count()
    page.get_by_label("Message").fill("use bash echo approve-me")
    page.get_by_role("button", name="Send").click()
    card = cards.nth(asked)
    card.wait_for()
    assert in_view(page, card.get_by_role("button", name="Approve"))
    assert in_view(page, said.last), said.last.inner_text()
    shot(page, f"chat-approval-{size['width']}")
    done = page.locator(".conversation .assistant", has_text="the tool said: approve-me")
    ran = done.count()
    card.get_by_role("button", name="Approve").click()
    done.nth(ran).wait_for()
    assert in_view(page, done.nth(ran)), done.nth(ran).bounding_box()
    assert in_view(page, said.last), said.last.bounding_box()


def test_the_file_pickers_label_is_whole_and_names_the_chosen_file(
    page: Any, size: dict[str, int], tmp_path: Path, seeded: dict[str, str]
) -> None:
    page.goto("/chat")
    picker = page.locator("label.attach")
    assert picker.is_visible()
    assert picker.inner_text().strip() == "Attach a file"
    assert picker.evaluate(
        "e => e.scrollWidth <= e.clientWidth && e.scrollHeight <= e.clientHeight"
    )
    box = picker.bounding_box()
    assert box is not None and box["x"] + box["width"] <= size["width"]
    notes = tmp_path / "meeting-notes.txt"
    notes.write_text("the meeting moved to Thursday\n")
    page.get_by_label("Attach a file").set_input_files(str(notes))
    chosen = page.locator("#chosen")
    assert chosen.inner_text() == "meeting-notes.txt"
    assert chosen.is_visible() and in_view(page, page.locator(".conversation > li").last)
    check_fits(page, "chat", size)
