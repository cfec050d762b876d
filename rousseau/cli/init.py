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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rousseau.cli import common
from rousseau.cli.common import fail
from rousseau.private import private_folder

if TYPE_CHECKING:
    from rousseau.cli.init_platforms import Chosen
    from rousseau.config import Config
    from rousseau.transports.base import Transport

T = TypeVar("T")

PROVIDERS: dict[str, tuple[str, str | None]] = {
    "anthropic": ("Claude through the Anthropic API", "ANTHROPIC_API_KEY"),
    "openai": ("OpenAI, or an OpenAI-compatible server", "OPENAI_API_KEY"),
    "openrouter": ("many vendors' models through OpenRouter", "OPENROUTER_API_KEY"),
    "ollama": ("a local Ollama, no key needed", None),
    "claudecli": ("the Claude Code CLI, signed in on this machine", None),
}
"""The providers `init` sets up: name, what it is, and the variable its key comes from."""

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
    chosen: list[Chosen] = field(default_factory=list)
    """The other platforms' sections."""
    base: str | None = None
    """With --add: the existing file, which the new section joins."""

    def secrets(self) -> list[str]:
        given = [s for s in (self.api_key, self.telegram_token) if s]
        return given + [s for c in self.chosen for s in c.secrets()]

    def approvers(self) -> list[str]:
        """Every owner as the approver names them, `transport:id`."""
        owners = [f"telegram:{o}" for o in self.owners] if self.telegram_token else []
        return owners + [f"{c.platform.name}:{o}" for c in self.chosen for o in c.owners]


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
    if args.add:
        return _add(args, path)
    if path.exists() and not args.force:
        raise Failed(f"{path} already exists; pass --force to replace it")
    _can_ask(args)
    which = args.transport or ("telegram" if token_given(args) else None)
    if which in (None, "telegram"):
        for owner in args.allow:
            if not owner.isdigit():
                raise Failed(f"--allow {owner!r}: a Telegram user id is a number, e.g. 42", 2)
    if args.yes and args.allow and which in (None, "none"):
        raise Failed("--allow admits a transport's senders: pass --transport (or a bot token)", 2)
    if args.yes and which not in (None, "none", "whatsapp") and not args.allow:
        raise Failed(f"--yes with {which} needs --allow ID: nobody would be admitted", 2)
    folder = path.parent
    private_folder(folder)
    if not args.yes:
        print(f"This writes {path}. Ctrl-C at any point leaves nothing behind.\n")
    answers = Answers(model=args.model or "", base_url=args.base_url or "", owners=args.allow)
    answers.telegram_base_url = args.telegram_base_url or from_env("telegram", "base_url")
    from rousseau.cli.init_provider import provider

    provider(args, answers, load_text("", folder), folder)
    platform(args, answers, folder, which or ("none" if args.yes else _ask_platform()))
    _install(render(answers), path, force=args.force)
    _done(answers, path)
    return 0


def _can_ask(args: argparse.Namespace) -> None:
    if not args.yes and not sys.stdin.isatty():
        raise Failed("no terminal to ask questions on; in scripts pass --yes and the flags", 2)


def _add(args: argparse.Namespace, path: Path) -> int:
    """`init --add NAME`: one more platform in an existing file, whose comments, keys and
    layout stay; its owners join the approver's."""
    import yaml

    name = args.add
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Failed(f"{path}: no config to add to; run `rousseau init` first") from None
    present = yaml.safe_load(text) or {}
    if not isinstance(present, dict):
        raise Failed(f"{path}: not a mapping of keys; fix it first (rousseau doctor)")
    if name in present:
        raise Failed(f"{name}: {path} already has a {name} section; edit it there")
    _can_ask(args)
    if name == "telegram":
        for owner in args.allow:
            if not owner.isdigit():
                raise Failed(f"--allow {owner!r}: a Telegram user id is a number, e.g. 42", 2)
    _loads(path)  # the file as it is must load: its errors are not ours
    answers = Answers(owners=args.allow, base=text)
    answers.telegram_base_url = args.telegram_base_url or from_env("telegram", "base_url")
    if not platform(args, answers, path.parent, name):
        raise Failed(f"{name}: not added")
    _install(render(answers), path, force=True)
    print(f"\nadded {name} to {path}")
    print("Next: restart the daemon to connect it (rousseau service restart, or rousseau run)")
    return 0


def _loads(path: Path) -> None:
    from rousseau.agent import ConfigError
    from rousseau.config import load_config

    try:
        load_config(str(path))
    except ConfigError as exc:
        raise Failed(f"{exc}; fix it first (rousseau doctor)") from None


def platform(args: argparse.Namespace, answers: Answers, folder: Path, name: str) -> bool:
    """Set up the platform `name` (`none`: no transport); False when its SDK is missing
    (said, with the command that installs it) and nothing of it was asked."""
    if name == "none":
        return False
    from rousseau.cli.init_platforms import PLATFORMS, set_up

    module = "telegram" if name == "telegram" else PLATFORMS[name].module
    missing = missing_sdk(module, name) if module else None
    if missing is not None:  # said before any question about it, and nothing asked is lost
        if args.yes or args.add:
            raise Failed(f"{name}: {missing}", 2)
        print(f"\n{name}: {missing}")
        print(f"Install it, then run `rousseau init --add {name}`. Writing the rest now.")
        return False
    if name == "telegram":
        from rousseau.cli.init_telegram import telegram

        telegram(args, answers, folder)
    else:
        set_up(args, answers, folder, name)
    return True


def _ask_platform() -> str:
    from rousseau.cli.init_platforms import PLATFORMS

    offered = {"telegram": ("telegram", "a Telegram bot")} | {
        n: (p.module, p.label) for n, p in PLATFORMS.items()
    }
    offered["none"] = ("", "none for now: `rousseau chat` here, or the web chat")
    names = list(offered)
    print("\nWhere will people talk to it?")
    width = max(map(len, offered)) + 2
    for number, (name, (module, label)) in enumerate(offered.items(), 1):
        absent = " (not installed)" if module and missing_sdk(module, name) else ""
        print(f"  {number:>2}) {name:<{width}}{label}{absent}")
    while True:
        answer = input("Choose [telegram]: ").strip().lower() or "telegram"
        if answer.isdigit() and 1 <= int(answer) <= len(names):
            return names[int(answer) - 1]
        if answer in offered:
            return answer
        print(f"  one of 1-{len(names)}, or a name: {', '.join(names)}")


def token_given(args: argparse.Namespace) -> bool:
    return bool(args.telegram_token or os.environ.get("TELEGRAM_BOT_TOKEN"))


def from_env(section: str, key: str) -> str:
    """A value this shell's environment gives the configuration (`ROUSSEAU_SECTION_KEY`)."""
    return os.environ.get(f"ROUSSEAU_{section}_{key}".upper(), "").strip()


def call_transport(transport: Transport, call: Callable[[], Awaitable[T]]) -> T:
    """One of the transport's calls, bounded; its connections closed after."""
    import anyio

    from rousseau.agent import RousseauError

    async def run() -> T:
        try:
            with anyio.fail_after(CHECK_TIMEOUT):
                return await call()
        finally:
            with anyio.CancelScope(shield=True):
                await transport.aclose()

    try:
        return anyio.run(run)
    except TimeoutError:
        raise Failed(f"{transport.name}: no answer within {CHECK_TIMEOUT:.0f} s") from None
    except RousseauError as exc:
        raise Failed(str(exc)) from None


def missing_sdk(module: str, extra: str) -> str | None:
    """What to run to install `extra`, if its SDK (`module`) is not installed here."""
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        return None
    from rousseau.agent.errors import install_command

    return f"its SDK is not installed here: {install_command(extra)}"


# -- the file ------------------------------------------------------------------------------


def render(answers: Answers) -> str:
    """The config file's text, commented (strings as JSON, which YAML reads as they are);
    with --add, the existing file with the new section after it."""
    lines = _sections(answers)
    if answers.base is not None:
        return _extended(answers.base, answers.approvers()) + "\n".join(lines) + "\n"
    name, q = answers.provider, json.dumps
    head = [
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
    head += [f"{name}:", *section] if section else [f"{name}: {{}}"]
    owners = answers.approvers()
    if owners:
        lines += [
            "",
            "agent:",
            "  approver:",
            "    # Tool calls: read, grep and memory run; any other call is put to the owners, who",
            "    # answer in chat with `yes CODE` or `no CODE` (unanswered in 5 minutes: refused).",
            "    mode: ask",
            "    allow:",
            "      - {tool: read}",
            "      - {tool: grep}",
            "      - {tool: memory}",
            f"    owners: [{', '.join(q(o) for o in owners)}]",
        ]
    return "\n".join(head + lines) + "\n"


def _indent(text: str) -> int:
    """How far the file's nested keys are indented (2 when nothing is nested)."""
    steps = [
        len(line) - len(line.lstrip(" "))
        for line in text.splitlines()
        if line.startswith(" ") and line.strip() and not line.lstrip().startswith(("#", "-"))
    ]
    return min(steps, default=2)


def _sections(answers: Answers) -> list[str]:
    lines: list[str] = []
    if answers.telegram_token:
        from rousseau.cli.init_telegram import telegram_lines

        lines += telegram_lines(answers)
    for chosen in answers.chosen:
        lines += chosen.lines()
    return lines


def _extended(text: str, owners: list[str]) -> str:
    """`text` with `owners` added to agent.approver.owners; the rest as it was, comments
    included (ruamel.yaml writes it back as it read it)."""
    if not owners:
        return text if text.endswith("\n") else text + "\n"
    import io

    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap, CommentedSeq
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString
    from ruamel.yaml.util import load_yaml_guess_indent

    _, sequence, offset = load_yaml_guess_indent(text)  # how its lists are indented
    writer = YAML()
    writer.preserve_quotes = True
    writer.width = 4096
    writer.indent(mapping=_indent(text), sequence=sequence or 2, offset=offset or 0)
    data = writer.load(text)
    agent = data.setdefault("agent", CommentedMap())
    approver = agent.setdefault("approver", CommentedMap())
    if approver is None:
        approver = agent["approver"] = CommentedMap()
    listed = approver.setdefault("owners", CommentedSeq())
    if listed is None:
        listed = approver["owners"] = CommentedSeq()
    listed.extend(DoubleQuotedScalarString(o) for o in owners if o not in listed)
    out = io.StringIO()
    writer.dump(data, out)
    return out.getvalue()


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
    for chosen in answers.chosen:
        owners = printable(", ".join(chosen.owners))
        print(f"  {chosen.platform.name:<9} allowlist and approval owners: {owners}")
    named = "" if path == Path(DEFAULT_PATH).expanduser() else f" --config {path}"
    print(f"Next: rousseau{named} {'run' if answers.approvers() else 'chat'}")


def printable(text: str) -> str:
    """`text` safe to print: a name may carry terminal control codes."""
    return "".join(c if c.isprintable() else "?" for c in text)
