"""`rousseau init`, its model part: the provider chosen (the ones found here offered), its
key and address asked, and both proven with one request."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rousseau.cli.common import close_provider
from rousseau.cli.init import (
    CHECK_TIMEOUT,
    PROVIDERS,
    Answers,
    Failed,
    from_env,
    load_text,
    mask,
    masked,
    render,
)

if TYPE_CHECKING:
    from rousseau.config import Config

LOCAL_SERVERS = {
    "Ollama": "http://localhost:11434/v1",
    "LM Studio": "http://localhost:1234/v1",
    "vLLM": "http://localhost:8000/v1",
    "llama.cpp": "http://localhost:8080/v1",
}
"""OpenAI-compatible servers people run on their own machine, at their usual addresses."""
NO_KEY = "no-key"  # what a local server that checks no key is given (the SDK wants one)


def provider(args: argparse.Namespace, answers: Answers, env: Config, folder: Path) -> None:
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
        answers.base_url = answers.base_url or from_env(name, "base_url")
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
