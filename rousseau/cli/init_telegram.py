"""`rousseau init`, its Telegram part: the bot's token checked with getMe, and the owner
admitted by the first private message they send the bot."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rousseau.cli.init import (
    Answers,
    Failed,
    call_transport,
    confirm,
    load_text,
    mask,
    masked,
    printable,
    render,
)

if TYPE_CHECKING:
    from rousseau.config import Config
    from rousseau.transports.telegram import TelegramTransport

POLL_SECONDS = 25
_UPDATES = ["message", "callback_query"]  # as the daemon asks: Telegram remembers the choice


def telegram(args: argparse.Namespace, answers: Answers, folder: Path) -> None:
    """The bot's token, checked with getMe, and who may talk to it."""
    answers.telegram_token = args.telegram_token or os.environ.get("TELEGRAM_BOT_TOKEN", "")
    if args.yes and not answers.telegram_token:
        missing = "telegram.token: not given; set TELEGRAM_BOT_TOKEN or pass --telegram-token"
        raise Failed(missing, 2)
    if not args.yes and not args.telegram_token:
        print("\nTelegram: ask @BotFather for a bot (/newbot) and copy the token it gives.")
        answers.telegram_token = _ask_token(os.environ.get("TELEGRAM_BOT_TOKEN", ""))
    if not answers.telegram_token:
        return
    mask(args, answers.secrets())
    while not args.no_check:
        try:
            handle = _check_telegram(load_text(render(answers), folder))
        except Failed as exc:
            if args.yes:
                raise
            print(f"FAIL  {masked(exc)}")
            answers.telegram_token = _ask_token("")
            mask(args, answers.secrets())
            continue
        print(f"ok    the token is {handle}'s")
        break
    if not answers.owners:
        answers.owners = [_owner(load_text(render(answers), folder), args.wait)]


def _ask_token(stored: str) -> str:
    import getpass

    hint = "Enter: the one in TELEGRAM_BOT_TOKEN" if stored else "input hidden"
    while True:
        token = getpass.getpass(f"Bot token ({hint}): ").strip() or stored
        if token:
            return token


def _bot(config: Config) -> TelegramTransport:
    from rousseau.transports.telegram import TelegramTransport

    section = config.telegram
    assert section is not None and section.token is not None
    return TelegramTransport(
        section.token.get_secret_value(), base_url=section.base_url, poll_timeout=POLL_SECONDS
    )


def _check_telegram(config: Config) -> str:
    transport = _bot(config)
    return call_transport(transport, transport.check)


def _owner(config: Config, wait: float) -> str:
    """The id of whoever sends the bot a private message now, once the user confirms it.

    Messages the bot got before are skipped, and the chosen one is acknowledged: the daemon
    answers neither.
    """
    import time

    import anyio

    deadline = time.monotonic() + wait
    offset: int | None = None
    while True:
        remaining = deadline - time.monotonic()
        found = anyio.run(_next_sender, config, offset, remaining) if remaining > 0 else None
        if found is None:
            raise Failed(
                f"no message reached the bot within {wait:.0f} s; nothing written "
                "(run it again, or pass --allow ID)"
            )
        offset, sender, user_id = found
        print(f"\nMessage from {sender}.")
        if confirm("Admit them as the owner?"):
            anyio.run(_acknowledge, config, offset)
            print(f"ok    {sender} is the owner")
            return user_id
        print("Not admitted. Waiting for another message...", flush=True)


async def _next_sender(
    config: Config, offset: int | None, wait: float
) -> tuple[int, str, str] | None:
    """The next private message within `wait` seconds: (offset past it, sender, sender's id).
    Without an offset, what the bot got before now is skipped."""
    import anyio
    from telegram.error import RetryAfter

    transport = _bot(config)
    bot = transport.bot
    async with _talking(transport):
        await bot.initialize()
        if offset is None:
            await bot.delete_webhook()
            earlier = await bot.get_updates(offset=-1, timeout=0, allowed_updates=_UPDATES)
            offset = max((u.update_id + 1 for u in earlier), default=0)
            print(f"\nNow send any message to @{bot.username} from your own Telegram account.")
            print(f"Waiting up to {wait:.0f} s ...", flush=True)
        with anyio.move_on_after(wait):
            while True:
                try:
                    updates = await bot.get_updates(
                        offset=offset, timeout=POLL_SECONDS, allowed_updates=_UPDATES
                    )
                except RetryAfter:
                    await anyio.sleep(5)
                    continue
                for update in updates:
                    offset = update.update_id + 1
                    message = update.message
                    user = message.from_user if message is not None else None
                    if message is None or user is None or user.is_bot:
                        continue
                    if message.chat.type == "private":
                        return offset, _who(user), str(user.id)
    return None


async def _acknowledge(config: Config, offset: int) -> None:
    """Move the update offset to `offset`: Telegram forgets what came before it."""
    transport = _bot(config)
    async with _talking(transport):
        await transport.bot.initialize()
        await transport.bot.get_updates(offset=offset, timeout=0, allowed_updates=_UPDATES)


@asynccontextmanager
async def _talking(transport: TelegramTransport) -> AsyncIterator[None]:
    """The SDK's errors as ours (the token masked); the bot's connections closed after."""
    import anyio
    from telegram.error import InvalidToken, TelegramError

    from rousseau.agent import TransportAuthError, TransportError
    from rousseau.transports.base import describe

    try:
        yield
    except InvalidToken:
        raise TransportAuthError(
            "telegram.token: the bot token was rejected by the Bot API"
        ) from None
    except TelegramError as exc:
        raise TransportError(f"telegram: {describe(exc, transport.bot.token)}") from None
    finally:
        with anyio.CancelScope(shield=True):
            await transport.aclose()


def _who(user: Any) -> str:
    """`Ann Smith (@ann, id 42)`, printable."""
    handle = f"@{user.username}, " if user.username else ""
    return printable(f"{user.full_name} ({handle}id {user.id})")


def telegram_lines(answers: Answers) -> list[str]:
    q = json.dumps
    return [
        "",
        "telegram:",
        "  # The bot's token from @BotFather (TELEGRAM_BOT_TOKEN is read only when this is",
        "  # unset).",
        f"  token: {q(answers.telegram_token)}",
        *(
            [
                "  # The Bot API's address, in place of Telegram's own.",
                f"  base_url: {q(answers.telegram_base_url)}",
            ]
            if answers.telegram_base_url
            else []
        ),
        "  # The Telegram user ids that may talk to the bot; everyone else is ignored.",
        f"  allowlist: [{', '.join(answers.owners)}]",
        "  # allowlist, or pairing (strangers get a code to `rousseau pair approve`), or open.",
        "  policy: allowlist",
    ]
