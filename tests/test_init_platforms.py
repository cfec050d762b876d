"""`rousseau init` for each platform besides Telegram, as a person runs it at a terminal:
from no config to the owner answered by `rousseau run`, each platform through its fake on
127.0.0.1 (Discord, Slack, signal-cli) or the real server (Synapse, Dovecot; in
tests/matrix and tests/mail), a wrong credential said in one line and asked again."""

from __future__ import annotations

import json
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from rousseau.config import load_config
from tests.fakes.discord import OWNER_ID, FakeDiscord
from tests.fakes.llm import FakeLLMServer
from tests.fakes.signal_cli import CODE, LINKED
from tests.fakes.slack import FakeSlack
from tests.helpers import ROUSSEAU
from tests.init_support import KEY, Running, init_env, init_quietly, start_init, written
from tests.transports.harness_signal import SignalHarness

STRANGER = "700000000000000666"


@pytest.fixture
def env(tmp_path: Path, fake_llm: FakeLLMServer) -> dict[str, str]:
    return init_env(tmp_path, fake_llm)


@pytest.fixture
def discord() -> Iterator[FakeDiscord]:
    fake = FakeDiscord().start()
    yield fake
    fake.stop()


@pytest.mark.timeout(180)
def test_discord_checks_the_token_prints_the_invite_and_admits_the_first_dm(
    tmp_path: Path, env: dict[str, str], discord: FakeDiscord, fake_llm: FakeLLMServer
) -> None:
    env |= {
        "ROUSSEAU_DISCORD_API_BASE": discord.api_base,
        "ROUSSEAU_DISCORD_GATEWAY_URL": discord.gateway_url,
    }
    discord.message_content_off = True  # as a new application starts
    term = start_init(env)
    term.expect("Choose [telegram]: ")
    term.type("discord")
    term.expect("turn on Message\nContent Intent")
    term.expect("Bot token (input hidden): ")
    term.type("not-the-token")
    term.expect("FAIL  discord.token: the bot token was rejected")
    term.expect("Bot token (input hidden): ")
    term.type(discord.token)
    term.expect("ok    discord: ")
    term.expect("https://discord.com/oauth2/authorize?client_id=")
    invite = next(line for line in term.output.splitlines() if "oauth2/authorize" in line)
    assert "scope=bot" in invite and "permissions=" in invite
    term.expect("direct message from your own Discord account")
    term.expect("Waiting up to 300 s")
    term.expect("FAIL  discord.token: this bot may not read messages (gateway close 4014)")
    term.expect("press Enter to wait again")
    discord.message_content_off = False  # turned on on the Developer Portal
    term.type("")
    discord.wait_ready(identifies=1, timeout=30)
    discord.dm("who is this", user_id=STRANGER)
    term.expect(f"({STRANGER})")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("n")
    term.expect("Waiting for another message")
    discord.dm("it's me")
    term.expect(f"({OWNER_ID})")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("y")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output
    assert discord.token not in term.output and KEY not in term.output

    config = load_config(str(written(tmp_path)), {})
    assert config.discord is not None and config.discord.allowlist == [OWNER_ID]
    assert config.discord.api_base == discord.api_base
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"discord:{OWNER_ID}"]

    daemon = Running(env, tmp_path)
    try:
        discord.wait_ready(identifies=2, timeout=30)
        discord.dm("are you there?")
        deadline = time.monotonic() + 30
        while not discord.sent and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [m.content for m in discord.sent] == ["echo: are you there?"], daemon.said()
        asked = [r.body["messages"][-1]["content"] for r in fake_llm.posts()]
        assert asked == ["are you there?"]  # neither set-up message reached the model
    finally:
        daemon.stop()


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.mark.timeout(180)
def test_slack_prints_its_manifest_checks_both_tokens_and_admits_the_first_dm(
    tmp_path: Path, env: dict[str, str], slack: FakeSlack, fake_llm: FakeLLMServer
) -> None:
    env |= {"ROUSSEAU_SLACK_BASE_URL": slack.url + "/api/"}
    term = start_init(env)
    term.expect("Choose [telegram]: ")
    term.type("slack")
    term.expect("socket_mode_enabled: true")
    term.expect("App-level token (xapp-...) (input hidden): ")
    term.type("xoxb-the-wrong-kind")
    term.expect("it starts with xapp-")
    term.expect("App-level token (xapp-...) (input hidden): ")
    term.type("xapp-1-not-this-one")
    term.expect("Bot token (xoxb-...) (input hidden): ")
    term.type(slack.bot_token)
    term.expect("FAIL  slack.app_token: the token was rejected by Slack")
    term.expect("App-level token (xapp-...) (input hidden): ")
    term.type(slack.app_token)
    term.expect("Bot token (xoxb-...) (input hidden): ")
    term.type("")  # Enter: the one given before
    term.expect("ok    slack: <@UBOT0001>")
    term.expect("Waiting up to")
    slack.wait_connections(1, timeout=30)
    slack.message("hello", user="U0OWNER")
    term.expect("Message from U0OWNER")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output
    assert slack.app_token not in term.output and slack.bot_token not in term.output

    config = load_config(str(written(tmp_path)), {})
    assert config.slack is not None and config.slack.allowlist == ["U0OWNER"]
    assert config.slack.app_token is not None
    assert config.slack.app_token.get_secret_value() == slack.app_token
    assert config.agent.approver is not None
    assert config.agent.approver.owners == ["slack:U0OWNER"]

    daemon = Running(env, tmp_path)
    try:
        slack.wait_connections(2, timeout=30)
        slack.message("are you there?", user="U0OWNER")
        deadline = time.monotonic() + 30
        while not slack.posted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.text for p in slack.posted] == ["echo: are you there?"], daemon.said()
        assert [r.body["messages"][-1]["content"] for r in fake_llm.posts()] == ["are you there?"]
    finally:
        daemon.stop()


@pytest.fixture
def signal_cli() -> Iterator[SignalHarness]:
    harness = SignalHarness()
    yield harness
    harness.close()


@pytest.mark.timeout(180)
def test_signal_registers_a_number_and_admits_the_first_message(
    tmp_path: Path, env: dict[str, str], signal_cli: SignalHarness, fake_llm: FakeLLMServer
) -> None:
    env |= {
        "FAKE_SIGNAL_CONTROL": signal_cli.control,
        "FAKE_SIGNAL_LOG": str(signal_cli.log),
        "ROUSSEAU_SIGNAL_EXTRA_ARGS": json.dumps(["--config", str(signal_cli.dir / "data")]),
    }
    number = "+15550001234"
    term = start_init(env)
    term.expect("Choose [telegram]: ")
    term.type("signal")
    term.expect("signal-cli program [signal-cli]: ")
    term.type(str(signal_cli.binary))
    term.expect("ok    signal-cli 0.13.99 (fake)")
    term.expect("Choose [1]: ")
    term.type("2")
    term.expect("The number to register (+ and digits): ")
    term.type("5550001234")
    term.expect("with its country code")
    term.expect("(+ and digits): ")
    term.type(number)
    term.expect("Captcha link: ")
    term.type("signalcaptcha://solved")
    term.expect(f"The code sent to {number}: ")
    term.type("999-999")
    term.expect("FAIL  signal-cli verify: Verification failed")
    term.type(CODE)
    term.expect(f"ok    {number} is registered")
    term.expect(f"Now send a Signal message to {number}")
    term.expect("Waiting up to")
    signal_cli.dm("hello", sender=signal_cli.owner)
    term.expect(f"({signal_cli.owner})")
    term.expect("Admit them as the owner? [Y/n] ")
    term.type("y")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output

    config = load_config(str(written(tmp_path)), {})
    assert config.signal is not None and config.signal.account == number
    assert config.signal.allowlist == [signal_cli.owner]
    assert config.signal.binary == str(signal_cli.binary)
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"signal:{signal_cli.owner}"]

    daemon = Running(env, tmp_path)
    try:
        signal_cli.dm("are you there?", sender=signal_cli.owner)
        deadline = time.monotonic() + 30
        while not signal_cli.delivered() and time.monotonic() < deadline:
            time.sleep(0.05)
        delivered = [(d.chat, d.text) for d in signal_cli.delivered()]
        assert delivered == [(signal_cli.owner, "echo: are you there?")], daemon.said()
        assert [r.body["messages"][-1]["content"] for r in fake_llm.posts()] == ["are you there?"]
    finally:
        daemon.stop()


def test_signal_links_by_a_qr_code(
    tmp_path: Path, env: dict[str, str], signal_cli: SignalHarness
) -> None:
    env |= {
        "ROUSSEAU_SIGNAL_EXTRA_ARGS": json.dumps(["--config", str(signal_cli.dir / "data")]),
        "ROUSSEAU_SIGNAL_BINARY": str(signal_cli.binary),
    }
    term = start_init(env, "--allow", signal_cli.owner, "--transport", "signal")
    term.expect("signal-cli program [")
    term.type("")
    term.expect("Choose [1]: ")
    term.type("")
    term.expect("Link new device, and scan:")
    term.expect(f"ok    linked to {LINKED}")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output
    qr = term.output[term.output.index("and scan:") : term.output.index("Waiting up to")]
    assert sum(qr.count(c) for c in "█▀▄") > 100  # the address, drawn as a QR code
    config = load_config(str(written(tmp_path)), {})
    assert config.signal is not None and config.signal.account == LINKED


def paired_store(path: Path, jid: str) -> None:
    """A session store with a paired device, as whatsmeow leaves one (the table it reads)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE whatsmeow_device (jid TEXT PRIMARY KEY)")
        db.execute("INSERT INTO whatsmeow_device VALUES (?)", (jid,))


def test_whatsapp_the_linked_phone_is_the_owner_and_is_answered_in_message_yourself(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from tests.fakes.whatsapp import OWN_PHONE

    store = tmp_path / "wa" / "session.db"
    paired_store(store, f"{OWN_PHONE}.0:7@s.whatsapp.net")
    term = start_init(env | {"ROUSSEAU_WHATSAPP_STORE": str(store)})
    term.expect("Choose [telegram]: ")
    term.type("whatsapp")
    term.expect(f"ok    whatsapp: linked to +{OWN_PHONE}, the owner")
    term.expect("wrote")
    assert term.exit_code() == 0, term.output
    config = load_config(str(written(tmp_path)), {})
    assert config.whatsapp is not None and config.whatsapp.store == str(store)
    assert config.whatsapp.allowlist == [OWN_PHONE]
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"whatsapp:{OWN_PHONE}"]
    # WhatsApp's own protocol has no local server: the owner init wrote is checked against
    # the adapter with the stand-in client, the linked phone writing in "Message yourself".
    assert anyio.run(_note_to_self_answered, config.whatsapp.allowlist, tmp_path / "run")


async def _note_to_self_answered(allowlist: list[str], folder: Path) -> bool:
    from tests.fakes.whatsapp import OWN_PHONE
    from tests.transports.harness_whatsapp import WhatsAppHarness
    from tests.transports.test_conformance import act, daemon, delivered

    harness = WhatsAppHarness()
    [harness.owner] = allowlist
    async with daemon(harness, folder):
        note = harness.client.message(
            "hi me", sender=OWN_PHONE, chat=(OWN_PHONE, "s.whatsapp.net"), from_me=True
        )
        await act(harness.client.deliver, note)
        [reply] = await delivered(harness, 1)
    return reply.text == "echo: hi me"


def test_whatsapp_without_a_terminal_or_a_paired_session_says_how_to_link(
    tmp_path: Path, env: dict[str, str]
) -> None:
    store = tmp_path / "nothing" / "session.db"
    result = subprocess.run(
        [*ROUSSEAU, "init", "--yes", "--provider", "openai", "--transport", "whatsapp"],
        env=env | {"OPENAI_API_KEY": KEY, "ROUSSEAU_WHATSAPP_STORE": str(store)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "no device is paired" in result.stderr and "--add whatsapp" in result.stderr
    assert not (tmp_path / ".config" / "rousseau" / "config.yaml").exists()


def test_add_puts_a_transport_in_an_existing_file_keeping_its_comments(
    tmp_path: Path, env: dict[str, str], discord: FakeDiscord
) -> None:
    env |= {
        "ROUSSEAU_DISCORD_API_BASE": discord.api_base,
        "ROUSSEAU_DISCORD_GATEWAY_URL": discord.gateway_url,
    }
    first = init_quietly(
        env, "--yes", "--provider", "openai", "--api-key", KEY, "--no-check",
        "--telegram-token", "123:abc", "--allow", "4242",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    path = written(tmp_path)
    note = "# my own note, kept\nagent:\n  max_iterations: 7\n"
    mine = path.read_text().replace("agent:\n", note)
    path.write_text(mine)

    refused = init_quietly(env | {"DISCORD_TOKEN": "wrong"}, "--add", "discord", "--yes",
                           "--allow", OWNER_ID)  # fmt: skip
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "discord.token: the bot token was rejected" in refused.stderr
    assert path.read_text() == mine  # nothing lost, nothing half-written

    added = init_quietly(env | {"DISCORD_TOKEN": discord.token}, "--add", "discord", "--yes",
                         "--allow", OWNER_ID)  # fmt: skip
    assert added.returncode == 0, added.stderr
    text = path.read_text()
    owners = 'owners: ["telegram:4242"]'
    grown = mine.replace(owners, f'owners: ["telegram:4242", "discord:{OWNER_ID}"]')
    assert owners in mine and text.startswith(grown)  # one line grew, the rest is as it was
    assert "\ndiscord:\n" in text[len(grown) :]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = load_config(str(path), {})
    assert config.agent.max_iterations == 7
    assert config.telegram is not None and config.telegram.allowlist == ["4242"]
    assert config.discord is not None and config.discord.allowlist == [OWNER_ID]
    assert config.agent.approver is not None and config.agent.approver.mode == "ask"
    assert config.agent.approver.owners == ["telegram:4242", f"discord:{OWNER_ID}"]

    again = init_quietly(env, "--add", "discord", "--yes", "--allow", OWNER_ID)
    assert again.returncode == 1 and "already has a discord section" in again.stderr
    missing = init_quietly(env, "--add", "slack", "--yes", config=tmp_path / "none.yaml")
    assert missing.returncode == 1 and "run `rousseau init` first" in missing.stderr


def test_add_to_a_file_without_an_approver_names_the_owner_in_a_new_one(
    tmp_path: Path, env: dict[str, str], discord: FakeDiscord
) -> None:
    env |= {
        "ROUSSEAU_DISCORD_API_BASE": discord.api_base,
        "ROUSSEAU_DISCORD_GATEWAY_URL": discord.gateway_url,
        "DISCORD_TOKEN": discord.token,
    }
    path = tmp_path / "own.yaml"
    path.write_text("# written by hand\nprovider: openai\nopenai:\n  api_key: sk-x  # mine\n")
    path.chmod(0o600)
    added = init_quietly(env, "--add", "discord", "--yes", "--allow", OWNER_ID, config=path)
    assert added.returncode == 0, added.stderr
    text = path.read_text()
    assert text.startswith("# written by hand\n") and "api_key: sk-x  # mine" in text
    config = load_config(str(path), {})
    assert config.agent.approver is not None
    assert config.agent.approver.owners == [f"discord:{OWNER_ID}"]
    assert config.discord is not None and config.discord.allowlist == [OWNER_ID]


def added_with_a_checked_secret(
    tmp_path: Path,
    env: dict[str, str],
    name: str,
    secret: tuple[str, str],
    owner: str,
    refusal: str,
) -> Path:
    """`init --add NAME` after a first init: a wrong secret (in variable `secret[0]`) is
    refused in one line naming the key and leaves the file as it was; the right one
    (`secret[1]`) writes the section, never showing the secret. The file written."""
    first = init_quietly(
        env, "--yes", "--provider", "openai", "--api-key", KEY, "--no-check",
        "--telegram-token", "123:abc", "--allow", "4242",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    path = written(tmp_path)
    before = path.read_text()
    variable, value = secret
    refused = init_quietly(env | {variable: "wrong"}, "--add", name, "--yes", "--allow", owner)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert refusal in refused.stderr
    assert path.read_text() == before
    added = init_quietly(env | {variable: value}, "--add", name, "--yes", "--allow", owner)
    assert added.returncode == 0, added.stderr
    assert value not in added.stdout + added.stderr
    return path


def test_add_mattermost_checks_the_token_and_writes_its_section(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from tests.fakes.mattermost import OWNER_ID as MM_OWNER
    from tests.fakes.mattermost import TOKEN, FakeMattermost

    fake = FakeMattermost().start()
    try:
        path = added_with_a_checked_secret(
            tmp_path, env | {"ROUSSEAU_MATTERMOST_URL": fake.url}, "mattermost",
            ("MATTERMOST_TOKEN", TOKEN), MM_OWNER, "mattermost.token: the server refused it",
        )  # fmt: skip
        config = load_config(str(path), {"MATTERMOST_TOKEN": TOKEN})
        assert config.mattermost is not None and config.mattermost.url == fake.url
        assert config.mattermost.allowlist == [MM_OWNER]
    finally:
        fake.stop()


def test_add_feishu_checks_the_app_and_writes_its_section(
    tmp_path: Path, env: dict[str, str]
) -> None:
    from tests.fakes.feishu import APP_ID, APP_SECRET, FakeFeishu
    from tests.fakes.feishu import OWNER_ID as FEISHU_OWNER

    fake = FakeFeishu().start()
    try:
        place = {"ROUSSEAU_FEISHU_APP_ID": APP_ID, "ROUSSEAU_FEISHU_BASE_URL": fake.url}
        path = added_with_a_checked_secret(
            tmp_path, env | place, "feishu", ("FEISHU_APP_SECRET", APP_SECRET), FEISHU_OWNER,
            "feishu.app_secret: Feishu refused the app's credentials",
        )  # fmt: skip
        config = load_config(str(path), {"FEISHU_APP_SECRET": APP_SECRET})
        assert config.feishu is not None and config.feishu.base_url == fake.url
        assert config.feishu.app_id == APP_ID and config.feishu.allowlist == [FEISHU_OWNER]
    finally:
        fake.stop()


def test_teams_serves_its_endpoint_while_it_waits_and_admits_the_first_message(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A platform that posts to the daemon: `init` serves the messaging endpoint while it
    waits for the owner's first message, as `run` will."""
    from tests.fakes.teams import APP_ID, OWNER, PASSWORD, PERSONAL, TENANT, FakeTeams
    from tests.helpers import free_port

    fake = FakeTeams().start()
    try:
        env |= {
            "ROUSSEAU_TEAMS_LOGIN_ENDPOINT": fake.url,
            "ROUSSEAU_TEAMS_KEYS_URL": fake.keys_url,
        }
        port = free_port()
        term = start_init(env)
        term.expect("Choose [telegram]: ")
        term.type("teams")
        term.expect("The bot's Microsoft App ID: ")
        term.type(APP_ID)
        term.expect("The client secret (input hidden): ")
        term.type("wrong")
        term.expect("The tenant id: ")
        term.type(TENANT)
        term.expect("(host:port) [127.0.0.1:3978]: ")
        term.type(f"127.0.0.1:{port}")
        term.expect("FAIL  teams.app_password: Entra refused the app's credentials")
        term.expect(f"The bot's Microsoft App ID [{APP_ID}]: ")  # asked again, kept
        term.type("")
        term.expect("The client secret (input hidden): ")
        term.type(PASSWORD)
        term.expect(f"The tenant id [{TENANT}]: ")
        term.type("")
        term.expect(f"(host:port) [127.0.0.1:{port}]: ")
        term.type("")
        term.expect("ok    teams: ")
        term.expect("Waiting up to 300 s")
        endpoint = f"http://127.0.0.1:{port}/api/messages"
        deadline = time.monotonic() + 30
        while fake.post(endpoint, fake.message(PERSONAL, OWNER, "it's me")) != 200:
            assert time.monotonic() < deadline, term.output
            time.sleep(0.2)
        term.expect(f"({OWNER})")
        term.expect("Admit them as the owner? [Y/n] ")
        term.type("y")
        term.expect("wrote")
        assert term.exit_code() == 0, term.output
        assert PASSWORD not in term.output
        config = load_config(str(written(tmp_path)), {"TEAMS_APP_PASSWORD": PASSWORD})
        assert config.teams is not None and config.teams.allowlist == [OWNER]
        assert config.teams.listen == f"127.0.0.1:{port}"
    finally:
        fake.stop()
