"""An aiohttp networking backend for python-telegram-bot (its documented BaseRequest hook).

Why: under load the default httpx backend spends most of the daemon's CPU per reply; aiohttp
does the same HTTP for a fraction of it. Everything above the wire stays python-telegram-bot's.
"""

from __future__ import annotations

from urllib.parse import urlencode

from rousseau.agent import MissingExtraError
from rousseau.media import Download
from rousseau.media.download import CHUNK

try:
    import aiohttp
    from telegram.error import BadRequest, NetworkError, TimedOut
    from telegram.request import BaseRequest, RequestData
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise MissingExtraError("the telegram transport", "telegram") from exc

_FORM = {"Content-Type": "application/x-www-form-urlencoded"}


class AiohttpRequest(BaseRequest):
    last_payload: bytes = b""
    """The body of the latest response (the poller reads updates the SDK could not parse)."""

    def __init__(
        self,
        *,
        connections: int = 64,
        read_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        write_timeout: float = 5.0,
        media_write_timeout: float = 20.0,
    ) -> None:
        self._connections = connections
        self._read_timeout = read_timeout
        self._connect_timeout = connect_timeout
        self._write_timeout = write_timeout
        self._media_write_timeout = media_write_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float:
        return self._read_timeout

    async def initialize(self) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                headers={"User-Agent": self.USER_AGENT},
            )

    async def shutdown(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: float | object | None = BaseRequest.DEFAULT_NONE,
        write_timeout: float | object | None = BaseRequest.DEFAULT_NONE,
        connect_timeout: float | object | None = BaseRequest.DEFAULT_NONE,
        pool_timeout: float | object | None = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        if self._session is None or self._session.closed:
            raise RuntimeError("AiohttpRequest is not initialized")
        files = request_data.multipart_data if request_data else None
        read = self._read_timeout if read_timeout is BaseRequest.DEFAULT_NONE else read_timeout
        connect = (
            self._connect_timeout
            if connect_timeout is BaseRequest.DEFAULT_NONE
            else connect_timeout
        )
        data: aiohttp.FormData | bytes | None = None
        headers = None
        if files:
            form = aiohttp.FormData()
            for name, value in (request_data.json_parameters if request_data else {}).items():
                form.add_field(name, value)
            for name, (filename, content, mime) in files.items():
                form.add_field(name, content, filename=filename, content_type=mime)
            data = form
        elif request_data is not None:
            # Form-encoded as aiohttp would encode the dict, without the multipart writer it
            # builds first to decide how (3% of a message's CPU under load).
            data = urlencode(request_data.json_parameters).encode()
            headers = _FORM
        timeout = aiohttp.ClientTimeout(
            sock_read=read if isinstance(read, int | float) else None,
            sock_connect=connect if isinstance(connect, int | float) else None,
        )
        try:
            async with self._session.request(
                method, url, data=data, headers=headers, timeout=timeout
            ) as response:
                self.last_payload = await response.read()
                return response.status, self.last_payload
        except TimeoutError as exc:
            raise TimedOut() from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc

    async def download(self, url: str, into: Download) -> None:
        """A file of the Bot API's file server, a chunk at a time (PTB's own download reads
        it whole first): stopped at the download's limit, whatever getFile said of its size."""
        if self._session is None or self._session.closed:
            raise RuntimeError("AiohttpRequest is not initialized")
        timeout = aiohttp.ClientTimeout(
            sock_read=self._read_timeout, sock_connect=self._connect_timeout
        )
        try:
            async with self._session.get(url, timeout=timeout) as response:
                if 400 <= response.status < 500:  # gone, or past the server's limit
                    raise BadRequest(f"the file server answered HTTP {response.status}")
                if response.status != 200:
                    raise NetworkError(f"the file server answered HTTP {response.status}")
                into.declared(response.content_length)
                await into.write_all(response.content.iter_chunked(CHUNK))
        except TimeoutError as exc:
            raise TimedOut() from exc
        except aiohttp.ClientError as exc:  # the transport masks the token in the URL
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc
