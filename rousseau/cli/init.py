"""`rousseau init`: a commented config file from a few questions, or from flags alone.

What it writes is checked first: the model key with one real request, the Telegram token with
getMe, and the owner is admitted by the first message they send the bot, so nobody has to look
up a numeric id. The file is created 0600 and read back by the loader before it takes its
place; an existing one is replaced only with --force.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rousseau.cli import common
from rousseau.cli.common import close_provider, fail
from rousseau.private import private_folder

if TYPE_CHECKING:
    from rousseau.config import Config

PROVIDERS: dict[str, tuple[str, str | None]] = {
    "anthropic": ("Claude through the Anthropic API", "ANTHROPIC_API_KEY"),
    "openai": ("OpenAI, or an OpenAI-compatible server", "OPENAI_API_KEY"),
    "openrouter": ("many vendors' models through OpenRouter", "OPENROUTER_API_KEY"),
    "ollama": ("a local Ollama, no key needed", None),
    "claudecli": ("the Claude Code CLI, signed in on this machine", None),
}
"""The providers `init` sets up: name, what it is, and the variable its key comes from."""

LOCAL_SERVERS = {
    "Ollama": "http://localhost:11434/v1",
    "LM Studio": "http://localhost:1234/v1",
    "vLLM": "http://localhost:8000/v1",
    "llama.cpp": "http://localhost:8080/v1",
}
"""OpenAI-compatible servers people run on their own machine, at their usual addresses."""
NO_KEY = "no-key"  # what a local server that checks no key is given (the SDK wants one)

CHECK_TIMEOUT = 20.0


class Failed(Exception):
    """Set-up cannot go on: one line for the user, and the exit code."""

    def __init__(self, message: str, code: int = 1, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.unreachable = unreachable
        """Nothing answered at the address: the address is to be asked again, not the key."""


@dataclass(kw_only=True, slots=True)
class Answers:
    """What the file will say."""

    provider: str = ""
    """The provider's name, a key of PROVIDERS."""
    api_key: str = ""
    """Its key; empty for providers that need none."""
    model: str = ""
    """The model; empty leaves the provider's default."""
    base_url: str = ""
    """The provider's API address; empty leaves its own."""
    telegram_token: str = ""
    """The bot token; empty means no transport."""
    telegram_base_url: str = ""
    """The Bot API's address; empty leaves Telegram's own."""
    owners: list[str] = field(default_factory=list)
    """Telegram user ids admitted, and asked about tool calls."""

    def secrets(self) -> list[str]:
        return [s for s in (self.api_key, self.telegram_token) if s]


def init(args: argparse.Namespace) -> int:
    from rousseau.config import config_path

    path, _ = config_path(args.config, os.environ)
    mask(args, [])
    try:
        return _init(args, path)
    except Failed as exc:
        fail(str(exc))
        return exc.code
    except (KeyboardInterrupt, EOFError) as exc:
        print(file=sys.stderr)  # the prompt's line is still open
        fail("set-up cancelled; nothing written")
        return 130 if isinstance(exc, KeyboardInterrupt) else 1


def _init(args: argparse.Namespace, path: Path) -> int:
    if path.exists() and not args.force:
        raise Failed(f"{path} already exists; pass --force to replace it")
    if not args.yes and not sys.stdin.isatty():
        raise Failed("no terminal to ask questions on; in scripts pass --yes and the flags", 2)
    for owner in args.allow:
        if not owner.isdigit():
            raise Failed(f"--allow {owner!r}: a Telegram user id is a number, e.g. 42", 2)
    if args.yes and args.allow and not token_given(args):
        raise Failed("--allow admits Telegram users: pass --telegram-token too", 2)
    if args.yes and token_given(args) and not args.allow:
        raise Failed("--yes with a bot token needs --allow ID: nobody would be admitted", 2)
    folder = path.parent
    private_folder(folder)
    if not args.yes:
        print(f"This writes {path}. Ctrl-C at any point leaves nothing behind.\n")
    answers = Answers(model=args.model or "", base_url=args.base_url or "", owners=args.allow)
    answers.telegram_base_url = args.telegram_base_url or _from_env("telegram", "base_url")
    _provider(args, answers, load_text("", folder), folder)
    from rousseau.cli.init_telegram import telegram

    telegram(args, answers, folder)
    _install(render(answers), path, force=args.force)
    _done(answers, path)
    return 0


def token_given(args: argparse.Namespace) -> bool:
    return bool(args.telegram_token or os.environ.get("TELEGRAM_BOT_TOKEN"))


# -- the model -----------------------------------------------------------------------------


def _provider(args: argparse.Namespace, answers: Answers, env: Config, folder: Path) -> None:
    """Choose the provider and its key, and prove they work with one request."""
    name = args.provider
    if not name:
        found = _found(env)
        name = _default_provider(env, found, required=args.yes)
        if not args.yes:
            name = _choose(name, found)
    answers.provider = name
    if answers.base_url and name == "claudecli":
        raise Failed("--base-url: the Claude CLI has no API address to set", 2)
    # An address given through the environment is written: later commands and the service
    # read the file, not this shell's variables.
    if name != "claudecli":
        answers.base_url = answers.base_url or _from_env(name, "base_url")
    if name == "openai" and not args.yes and not answers.base_url:  # given: not asked
        answers.base_url = _ask_address(answers.base_url)
    variable = PROVIDERS[name][1]
    if variable is not None:
        answers.api_key = args.api_key or (
            _env_key(env, name) if args.yes else _ask_key(name, env, _local(answers.base_url))
        )
        if not answers.api_key:
            raise Failed(f"{name} needs an API key: set {variable} or pass --api-key", 2)
    default_model = getattr(env, name).model
    if not args.yes and not args.model and name != "claudecli":
        answers.model = input(f"Model [{default_model}]: ").strip()
    answers.model = answers.model or default_model
    mask(args, answers.secrets())
    if not args.no_check:
        _prove_provider(args, answers, folder)


def _prove_provider(args: argparse.Namespace, answers: Answers, folder: Path) -> None:
    """One request with what was answered; at a terminal, a failure asks again for what
    it points at: the address when nothing answered there, else the key."""
    name, variable = answers.provider, PROVIDERS[answers.provider][1]
    while True:
        try:
            _check_provider(load_text(render(answers), folder), name)
        except Failed as exc:
            if args.yes:
                raise
            print(f"FAIL  {masked(exc)}")
            if exc.unreachable and name in ("openai", "ollama", "openrouter"):
                answers.base_url = _ask_address(answers.base_url)
                continue
            if variable is None:
                raise
            answers.api_key = _ask_key(name, None, _local(answers.base_url))
            mask(args, answers.secrets())
            continue
        print(f"ok    {name} answers" + (" with this key" if variable else ""))
        return


def _from_env(section: str, key: str) -> str:
    """A value this shell's environment gives the configuration (`ROUSSEAU_SECTION_KEY`)."""
    return os.environ.get(f"ROUSSEAU_{section}_{key}".upper(), "").strip()


def _ask_address(current: str) -> str:
    """The OpenAI-compatible server's address: OpenAI's own, one found running here, or
    any other."""
    default = current or "https://api.openai.com/v1"
    found = [(name, url) for name, url in LOCAL_SERVERS.items() if _listening(url)]
    print("API address (OpenAI's own, or an OpenAI-compatible server):")
    for number, (name, url) in enumerate(found, 1):
        print(f"  {number}) {url:<28} {name} (found running here)")
    while True:
        answer = input(f"Address [{default}]: ").strip() or default
        if answer.isdigit() and 1 <= int(answer) <= len(found):
            return found[int(answer) - 1][1]
        if answer.startswith(("http://", "https://")):
            return answer.rstrip("/")
        print("  an http:// or https:// address, e.g. http://localhost:1234/v1")


def _local(url: str) -> bool:
    """A server on this machine, which may check no key."""
    from urllib.parse import urlsplit

    return (urlsplit(url).hostname or "") in ("localhost", "127.0.0.1", "::1")


def _found(env: Config) -> dict[str, str]:
    """The keyless providers present here: the Claude CLI on PATH, Ollama answering."""
    import shutil

    found = {}
    binary = shutil.which(env.claudecli.binary)
    if binary:
        found["claudecli"] = binary
    ollama = env.ollama.base_url or "http://localhost:11434/v1"
    if _listening(ollama):
        found["ollama"] = ollama
    return found


def _default_provider(env: Config, found: dict[str, str], *, required: bool) -> str:
    """As `rousseau run` picks: a key in the environment, the Claude CLI, a local Ollama."""
    if env.anthropic.api_key is not None:
        return "anthropic"
    if env.openai.api_key is not None:
        return "openai"
    for name in ("claudecli", "ollama"):
        if name in found:
            return name
    if required:
        raise Failed(
            "no provider found: pass --provider, or set ANTHROPIC_API_KEY or OPENAI_API_KEY", 2
        )
    return "anthropic"


def _choose(default: str, found: dict[str, str]) -> str:
    names = list(PROVIDERS)
    print("Model provider:")
    for number, name in enumerate(names, 1):
        seen = f" (found: {found[name]})" if name in found else ""
        print(f"  {number}) {name:<11}{PROVIDERS[name][0]}{seen}")
    while True:
        answer = input(f"Choose [{default}]: ").strip().lower() or default
        if answer.isdigit() and 1 <= int(answer) <= len(names):
            return names[int(answer) - 1]
        if answer in PROVIDERS:
            return answer
        print(f"  one of 1-{len(names)}, or a name: {', '.join(names)}")


def _ask_key(name: str, env: Config | None, local: bool = False) -> str:
    import getpass

    variable = PROVIDERS[name][1]
    stored = _env_key(env, name) if env is not None else ""
    if stored:
        hint = f"Enter: the one in {variable}"
    else:
        hint = "input hidden; Enter if the server needs none" if local else "input hidden"
    while True:
        key = getpass.getpass(f"{name} API key ({hint}): ").strip() or stored
        if key or local:
            return key or NO_KEY


def _env_key(env: Config | None, name: str) -> str:
    secret = getattr(getattr(env, name, None), "api_key", None)
    return str(secret.get_secret_value()) if secret is not None else ""


def _check_provider(config: Config, name: str) -> None:
    import anyio

    from rousseau.agent import Message, ProviderUnavailableError, Request, RousseauError
    from rousseau.providers import build_provider

    provider = build_provider(config, name)

    async def check() -> None:
        try:
            with anyio.fail_after(CHECK_TIMEOUT):
                probe = getattr(provider, "check", None)
                if probe is not None:
                    await probe()
                else:
                    request = Request(session_id="init", system="", messages=[Message.user("hi")])
                    await provider.complete(request)
        finally:
            await close_provider(provider)

    try:
        anyio.run(check)
    except TimeoutError:
        raise Failed(f"{name}: no answer within {CHECK_TIMEOUT:.0f} s", unreachable=True) from None
    except ProviderUnavailableError as exc:
        raise Failed(str(exc), unreachable=True) from None
    except RousseauError as exc:
        raise Failed(str(exc)) from None


def _listening(url: str) -> bool:
    """Something accepts connections at `url`'s host and port (a quick look for Ollama)."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port), timeout=0.3):
            return True
    except OSError:
        return False


def missing_sdk(module: str, extra: str) -> str | None:
    """What to run to install `extra`, if its SDK (`module`) is not installed here."""
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        return None
    from rousseau.agent.errors import install_command

    return f"its SDK is not installed here: {install_command(extra)}"


# -- the file ------------------------------------------------------------------------------


def render(answers: Answers) -> str:
    """The config file's text, commented (strings as JSON, which YAML reads as they are)."""
    name, q = answers.provider, json.dumps
    lines = [
        "# rousseau's configuration, written by `rousseau init`. Every key is optional; the",
        "# configuration reference lists them all with their defaults. The file holds",
        "# secrets: keep it private (mode 0600). `rousseau doctor` checks it.",
        "",
        "# The model backend: anthropic | openai | openrouter | ollama | bedrock | vertex |",
        "# claudecli.",
        f"provider: {name}",
    ]
    section = []
    if answers.api_key:
        section += [
            f"  # The API key ({PROVIDERS[name][1]} is read only when this is unset).",
            f"  api_key: {q(answers.api_key)}",
        ]
    if answers.model:
        section.append(f"  model: {q(answers.model)}")
    if answers.base_url:
        section += [
            "  # The API address, in place of the provider's own.",
            f"  base_url: {q(answers.base_url)}",
        ]
    lines += [f"{name}:", *section] if section else [f"{name}: {{}}"]
    if answers.telegram_token:
        from rousseau.cli.init_telegram import telegram_lines

        lines += telegram_lines(answers)
    return "\n".join(lines) + "\n"


def load_text(text: str, folder: Path) -> Config:
    """`text` as the loader reads it, with the environment's variables over it."""
    from rousseau.config import load_config

    staged = _stage(text, folder)
    try:
        return load_config(str(staged))
    finally:
        staged.unlink(missing_ok=True)


def _install(text: str, path: Path, *, force: bool) -> None:
    """Write `text` to `path`: 0600 from its creation, read back by the loader, then moved
    into place in one step."""
    from rousseau.config import load_config

    staged = _stage(text, path.parent)
    try:
        load_config(str(staged))
        if force:
            os.replace(staged, path)
        else:
            try:
                os.link(staged, path)  # unlike a rename, fails if a file appeared meanwhile
            except FileExistsError:
                raise Failed(f"{path} already exists; pass --force to replace it") from None
            except OSError:  # a file system without hard links
                if path.exists():
                    raise Failed(f"{path} already exists; pass --force to replace it") from None
                os.replace(staged, path)
        _sync(path.parent)
    finally:
        staged.unlink(missing_ok=True)


def _stage(text: str, folder: Path) -> Path:
    """A new file in `folder` (so moving it is atomic) holding `text`, for its owner only."""
    import secrets

    staged = folder / f".rousseau-init-{secrets.token_hex(6)}.yaml"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(fd, 0o600)  # exactly that, whatever the umask
        out.write(text)
        out.flush()
        os.fsync(fd)
    return staged


def _sync(folder: Path) -> None:
    """Make the new directory entry durable (best effort)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- the terminal --------------------------------------------------------------------------


def confirm(question: str) -> bool:
    while True:
        answer = input(f"{question} [Y/n] ").strip().lower()
        if answer in ("", "y", "yes"):
            return True
        if answer in ("n", "no"):
            return False


def masked(exc: Exception) -> str:
    return common.redactor.redact(str(exc)) if common.redactor else "(details hidden)"


def mask(args: argparse.Namespace, secrets: list[str]) -> None:
    """Failures printed from here on, and log lines, mask these secrets."""
    from rousseau.log import configure_logging

    level = "debug" if args.debug else "error"  # what goes wrong is said in one line
    common.redactor = configure_logging(level, "text", secrets)


def _done(answers: Answers, path: Path) -> None:
    from rousseau.config import DEFAULT_PATH

    print(f"\nwrote {path} (mode 0600)")
    print(f"  provider  {answers.provider} {answers.model}".rstrip())
    if answers.telegram_token:
        print(f"  telegram  allowlist and approval owners: {', '.join(answers.owners)}")
    named = "" if path == Path(DEFAULT_PATH).expanduser() else f" --config {path}"
    print(f"Next: rousseau{named} {'run' if answers.telegram_token else 'chat'}")
