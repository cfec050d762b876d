"""The conformance harness fixture: every adapter, each through its own wire-level fake (or
the real Synapse and Dovecot of the test session)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.matrix.synapse import Synapse
from tests.transports.conformance import Harness
from tests.transports.harness_discord import DiscordHarness
from tests.transports.harness_email import EmailHarness
from tests.transports.harness_feishu import FeishuHarness
from tests.transports.harness_googlechat import GoogleChatHarness
from tests.transports.harness_imessage import IMessageHarness
from tests.transports.harness_irc import IRCHarness
from tests.transports.harness_linechat import LinechatHarness
from tests.transports.harness_matrix import MatrixHarness
from tests.transports.harness_matrix_e2e import EncryptedMatrixHarness
from tests.transports.harness_mattermost import MattermostHarness
from tests.transports.harness_signal import SignalHarness
from tests.transports.harness_slack import SlackHarness
from tests.transports.harness_teams import TeamsHarness
from tests.transports.harness_telegram import TelegramHarness
from tests.transports.harness_whatsapp import WhatsAppHarness
from tests.transports.harness_xmpp import XMPPHarness

HARNESSES: dict[str, Callable[[], Any]] = {
    "discord": DiscordHarness,
    "email": EmailHarness,
    "feishu": FeishuHarness,
    "googlechat": GoogleChatHarness,
    "imessage": IMessageHarness,
    "irc": IRCHarness,
    "linechat": LinechatHarness,  # the example plugin's transport
    "matrix": MatrixHarness,
    "matrix-e2e": EncryptedMatrixHarness,  # the same adapter in encrypted rooms
    "mattermost": MattermostHarness,
    "signal": SignalHarness,
    "slack": SlackHarness,
    "teams": TeamsHarness,
    "telegram": TelegramHarness,
    "whatsapp": WhatsAppHarness,
    "xmpp": XMPPHarness,
}


@pytest.fixture
async def encrypted_matrix(
    synapse: Synapse, tmp_path: Path, anyio_backend: str
) -> AsyncIterator[EncryptedMatrixHarness]:
    made = EncryptedMatrixHarness(synapse, tmp_path)
    await made.start()
    yield made
    await made.stop()


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    if request.param == "matrix":  # a real homeserver, started once for the session
        made = MatrixHarness(request.getfixturevalue("synapse"))
    elif request.param == "matrix-e2e":  # people on E2E clients, on the test's loop
        made = request.getfixturevalue("encrypted_matrix")
    elif request.param == "irc":  # a real IRC server, started once for the session
        made = IRCHarness(request.getfixturevalue("ngircd"))
    elif request.param == "xmpp":  # a real XMPP server, started once for the session
        made = XMPPHarness(request.getfixturevalue("prosody"))
    elif request.param == "email":  # a real IMAP server, started once for the session
        made = EmailHarness(request.getfixturevalue("dovecot"))
    else:
        made = HARNESSES[request.param]()
    yield made
    made.close()
