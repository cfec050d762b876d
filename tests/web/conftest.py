"""`rousseau run` with the web face on, python-telegram-bot on the fake Bot API and the
OpenAI SDK on the fake model, one daemon per test module; and a real Chromium (Debian's,
driven by Playwright) per module for the browser tests.

With ROUSSEAU_SCREENSHOTS=DIR set, the browser tests save the pages they see there (docs/img
holds the ones the Web page shows)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.llm import FakeLLMServer, Recorded, Reply, openai_completion, openai_stream
from tests.fakes.speech import FakeSpeech
from tests.fakes.telegram import FakeTelegram
from tests.helpers import ROUSSEAU, free_port, unavailable

PASSWORD = "correct horse battery staple"
ALICE_KEY = "rsk-alice-0123456789abcdefghijklmnop"
BOB_KEY = "rsk-bob-0123456789abcdefghijklmnopqr"
OWNER_CHAT = 42
APPROVE_ME = "echo approve-me"
PROXY = "127.0.0.8"
"""The trusted proxy (web.trusted_proxies); other local addresses are not."""


def model(recorded: Recorded) -> Reply:
    """'use bash X' calls bash with `echo X` and 'remember X' keeps X in the profile (then
    says what came back); 'slowly' writes forty words at 20 a second; anything else is
    echoed with what the model was shown."""
    messages = recorded.body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        return openai_stream(openai_completion(f"the tool said: {last['content'].strip()}"))
    text = last["content"]
    if isinstance(text, list):
        text = " ".join(p.get("text", "") for p in text)
    found = re.search(r"use bash (.+)", text)
    if found:
        return openai_stream(openai_completion(None, [("bash", {"command": found.group(1)})]))
    found = re.search(r"^remember (.+)", text)
    if found:
        fact = {"action": "add", "text": found.group(1)}
        return openai_stream(openai_completion(None, [("memory", fact)]))
    if "slowly" in text:
        words = " ".join(f"word{i}" for i in range(40))
        reply = openai_stream(openai_completion(words), chunk=6)
        reply.pace = 0.05
        return reply
    seen = " | ".join(
        str(m.get("content")) for m in messages if m["role"] == "user"
    )  # what this session holds
    return openai_stream(openai_completion(f"echo: {text} [seen: {seen}]"))


def hashed(password: str) -> str:
    from argon2 import PasswordHasher

    return PasswordHasher().hash(password)


class WebDaemon:
    def __init__(
        self, tmp: Path, telegram: FakeTelegram, llm: FakeLLMServer, speech: str = ""
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp
        self.telegram = telegram
        self.config = tmp / "config.yaml"
        self.config.write_text(
            json.dumps(
                {
                    "provider": "openai",
                    "openai": {"api_key": "sk-test", "base_url": llm.url + "/v1", "max_retries": 0},
                    "telegram": {
                        "token": telegram.token,
                        "base_url": telegram.url,
                        "allowlist": [OWNER_CHAT],
                        "policy": "pairing",
                        "streaming": "off",
                    },
                    "state": {"path": str(tmp / "state.db")},
                    "agent": {
                        "workspace": str(tmp / "ws"),
                        "approver": {
                            "mode": "pattern",
                            "default": "allow",
                            "ask": [{"tool": "bash", "match": "approve-me"}],
                            "owners": [f"telegram:{OWNER_CHAT}"],
                        },
                    },
                    "shutdown_grace": "3s",
                    **({"speech": {"base_url": speech, "model": "tts-1"}} if speech else {}),
                    "web": {
                        "listen": f"127.0.0.1:{self.port}",
                        "password_hash": hashed(PASSWORD),
                        "chat_users": {"carol": hashed("carol's own password")},
                        "api_keys": [
                            {"key": ALICE_KEY, "owner": "alice"},
                            {"key": BOB_KEY, "owner": "bob"},
                        ],
                        "trusted_proxies": [PROXY],
                    },
                    "log": {"format": "json", "level": "info"},
                }
            )
        )
        self.log = tmp / "daemon.log"
        self.speech: FakeSpeech | None = None
        """The speech server its spoken replies come from, where it has one."""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WebDaemon:
        env = self.env()
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*ROUSSEAU, "--config", str(self.config), "run"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        import httpx

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise AssertionError("the daemon never became healthy:\n" + self.log.read_text())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def env(self) -> dict[str, str]:
        """The command's environment: a home of its own (and a checkout's code, if that is
        what runs the tests)."""
        env = {"PATH": os.environ["PATH"], "HOME": str(self.tmp)}
        if "PYTHONPATH" in os.environ:
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        return env

    def rousseau(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = self.env()
        return subprocess.run(
            [*ROUSSEAU, "--config", str(self.config), *args],
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def client(self) -> Any:
        import httpx

        return httpx.Client(base_url=self.url, timeout=10, follow_redirects=False)

    @contextmanager
    def logged_in(self, user: str = "owner", password: str = PASSWORD) -> Iterator[Any]:
        """A client with a login's cookie, and its CSRF token as `client.csrf`."""
        with self.client() as client:
            yield self._log_in(client, user, password)

    def _log_in(self, client: Any, user: str, password: str) -> Any:
        form = client.get("/login")
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None, form.text
        done = client.post(
            "/login", data={"csrf": token.group(1), "user": user, "password": password}
        )
        assert done.status_code == 303, done.text
        page = client.get("/chat" if user != "owner" else "/")
        found = re.search(r'<meta name="csrf" content="([^"]+)"', page.text)
        assert found is not None
        client.csrf = found.group(1)
        return client


@pytest.fixture(scope="module")
def web_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    try:
        import argon2  # noqa: F401
        import jinja2  # noqa: F401
    except ImportError:
        unavailable("the web extra is not installed (pip install 'rousseau[web]')")
    telegram = FakeTelegram().start()
    llm = FakeLLMServer().start()
    speech = FakeSpeech().start()
    llm.responder = model
    daemon = WebDaemon(tmp_path_factory.mktemp("web"), telegram, llm, speech.base_url).start()
    daemon.speech = speech
    yield daemon
    daemon.stop()
    telegram.stop()
    llm.stop()
    speech.stop()


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # no calls out of this machine
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
"""The windows the browser tests look through (and the screenshots' sizes)."""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("Playwright for Python is not installed (pip install playwright)")
    if not Path(CHROMIUM).exists():
        unavailable("Chromium is not installed (Debian's chromium package)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


def shot(page: Any, name: str) -> None:
    """Save what the window shows as web-NAME.png, when ROUSSEAU_SCREENSHOTS names a folder."""
    folder = os.environ.get("ROUSSEAU_SCREENSHOTS")
    if folder:
        page.screenshot(path=str(Path(folder) / f"web-{name}.png"))


def log_in(page: Any) -> None:
    page.goto("/login")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/$"))


def in_view(page: Any, item: Any) -> bool:
    """The element is in the window, whole, and above the composer pinned to its bottom."""
    box, composer = item.bounding_box(), page.locator("#say").bounding_box()
    if box is None or composer is None:
        return False
    bottom = page.evaluate("window.innerHeight")
    return (
        box["y"] >= 0
        and box["y"] + box["height"] <= composer["y"]
        and composer["y"] + composer["height"] <= bottom
    )
