"""Who is logged in to the web face: a password checked against its argon2 hash, or a
one-time link; then a random session token in an HttpOnly, SameSite=Strict cookie, kept
server-side (bounded) with the login's CSRF token. Failed login tries are limited per
client address and per account name."""

from __future__ import annotations

import functools
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import anyio
import structlog

from rousseau.policy import RateLimiter

if TYPE_CHECKING:
    from argon2 import PasswordHasher

    from rousseau.messages import KeyValue

log = structlog.get_logger("rousseau.web")

COOKIE = "rousseau_session"
LOGIN_TRIES = (4, 60.0)
"""Failed login tries per client address: four a minute; after them any try is refused
(right or wrong) until the minute has passed."""
ACCOUNT_TRIES = (6, 300.0)
"""Failed password tries per account name, from all addresses together: six, then one more
every 50 s (all six again 5 minutes after the last). Past them a try of that name is
refused (right or wrong) without being checked, and a refused try uses nothing up: a
stranger holds the name shut only while they keep trying, and a one-time link still logs
the owner in."""
MAX_NAMES = 10_000
"""Names nobody has whose failed tries are counted at once (the least recently tried go
first); the configured names are never dropped."""
MAX_LOGINS = 1000
"""Logins kept at once; the least recently used goes first."""
LINK_TTL = 900.0
"""A one-time link works this long (seconds) after `rousseau web link` made it."""
LINKS = "web-login"
"""The key-value space (kept in the store) where one-time links wait to be used."""
_USED = "used"  # a link's value once it has logged someone in
OWNER = "owner"
"""The owner's name in the web chat (a chat user logs in under their own)."""

Role = Literal["owner", "chat"]


def hasher() -> PasswordHasher:
    """argon2id with the library's current parameters (imported on first use)."""
    from argon2 import PasswordHasher

    return PasswordHasher()


def hash_password(password: str) -> str:
    return hasher().hash(password)


def new_link() -> tuple[str, str]:
    """A one-time login token and the key it is kept under (only its digest is stored)."""
    token = secrets.token_urlsafe(32)
    return token, link_key(token)


def link_key(token: str) -> str:
    return "link:" + hashlib.sha256(token.encode()).hexdigest()


@dataclass(kw_only=True, slots=True)
class Login:
    user: str
    role: Role
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    last_used: float = field(default_factory=time.monotonic)

    @property
    def owner(self) -> bool:
        return self.role == "owner"


class Logins:
    """Checks passwords and links, and keeps who is logged in (in memory: a restart logs
    everyone out)."""

    def __init__(
        self,
        *,
        password_hash: str | None,
        chat_users: dict[str, str],
        ttl: float,
        links: KeyValue,
    ) -> None:
        self.password_hash = password_hash
        self.chat_users = chat_users
        self.ttl = ttl
        self.links = links
        self.tries = RateLimiter(LOGIN_TRIES, {}, max_keys=10_000)
        # Known names apart from the rest, so that trying made-up names never pushes the
        # owner's count out; unknown names are counted alike, so a refusal tells no names.
        self.known_tries = RateLimiter(ACCOUNT_TRIES, {}, max_keys=len(chat_users) + 1)
        self.unknown_tries = RateLimiter(ACCOUNT_TRIES, {}, max_keys=MAX_NAMES)
        self._logins: OrderedDict[str, Login] = OrderedDict()

    def may_try(self, client: str, user: str | None = None) -> bool:
        """Whether this client may try a link, or a password of `user`, now; the try counts
        against the client and the name unless `succeeded` gives it back."""
        if not self.tries.allow("login", client):
            log.warning("web.login_limited", client=client, by="address")
            return False
        if user is not None and not self._names(user).allow("login", user[:64]):
            self.tries.refund("login", client)  # not tried: the address is not charged
            log.warning("web.login_limited", client=client, user=user[:64], by="account")
            return False
        return True

    def succeeded(self, client: str, user: str | None = None) -> None:
        """A right password or link costs no try: only failures use up an address's four a
        minute and a name's six."""
        self.tries.refund("login", client)
        if user is not None:
            self._names(user).refund("login", user[:64])

    def _names(self, user: str) -> RateLimiter:
        known = user == OWNER or user in self.chat_users
        return self.known_tries if known else self.unknown_tries

    async def check_password(self, user: str, password: str) -> tuple[str, Login] | None:
        """A login (and its cookie value) for a right password; the owner's name is
        `owner`. Verifying takes tens of milliseconds of CPU: done on a thread."""
        if user == OWNER:
            stored, role = self.password_hash, "owner"
        else:
            stored, role = self.chat_users.get(user), "chat"
        # An unknown name costs a verification too: the time taken tells no names apart.
        right = await anyio.to_thread.run_sync(_verify, stored or _unknown(), password)
        if not (stored and password and right):
            log.warning("web.login_refused", user=user[:64])
            return None
        log.info("web.login", user=user, by="password")
        return self._new(user, "owner" if role == "owner" else "chat")

    async def link_state(self, token: str) -> Literal["fresh", "used", "expired", "unknown"]:
        """What a link is, without using it: what its page says before the button."""
        made = await self.links.get(link_key(token)) if token else None
        if made is None:
            return "unknown"
        if made in ("", _USED):
            return "used"
        return "expired" if time.time() - float(made) > LINK_TTL else "fresh"

    async def use_link(self, token: str) -> tuple[str, Login] | None:
        """The owner's login (and its cookie value) for a link made within LINK_TTL and not
        used before."""
        key = link_key(token)
        made = await self.links.get(key)
        if made in (None, "", _USED):
            return None
        await self.links.set(key, _USED)  # never again
        if time.time() - float(made) > LINK_TTL:
            return None
        log.info("web.login", user=OWNER, by="link")
        return self._new(OWNER, "owner")

    def _new(self, user: str, role: Role) -> tuple[str, Login]:
        login = Login(user=user, role=role)
        token = secrets.token_urlsafe(32)
        self._logins[_digest(token)] = login  # only the digest is kept
        while len(self._logins) > MAX_LOGINS:
            self._logins.popitem(last=False)
        return token, login

    def get(self, token: str | None) -> Login | None:
        if not token:
            return None
        key = _digest(token)
        login = self._logins.get(key)
        if login is None:
            return None
        now = time.monotonic()
        if now - login.last_used > self.ttl:
            del self._logins[key]
            return None
        login.last_used = now
        self._logins.move_to_end(key)
        return login

    def end(self, token: str | None) -> None:
        if token:
            self._logins.pop(_digest(token), None)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@functools.cache
def _unknown() -> str:
    """A hash no password is checked against in earnest (for names nobody has)."""
    return hash_password(secrets.token_urlsafe(16))


def _verify(stored: str, password: str) -> bool:
    from argon2.exceptions import InvalidHashError, VerificationError

    try:
        return bool(hasher().verify(stored, password))
    except (VerificationError, InvalidHashError):
        return False


def same(a: str, b: str) -> bool:
    """Constant-time comparison of two tokens."""
    return hmac.compare_digest(a.encode(), b.encode())
