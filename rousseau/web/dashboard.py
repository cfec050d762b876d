"""The owner's dashboard and the web chat page: server-rendered, one small script for what
updates live (approvals, pairings, transports, a streamed reply)."""

from __future__ import annotations

import datetime
import functools
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlencode

import anyio
import structlog
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import (
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from rousseau.agent import ContentKind, RousseauError
from rousseau.approvals import preview, visible
from rousseau.media import Download, Incoming
from rousseau.media.download import CHUNK
from rousseau.web.app import HERE, dumps
from rousseau.web.auth import COOKIE, Login, same
from rousseau.web.face import Face

if TYPE_CHECKING:
    from rousseau.state.backend import Backend

log = structlog.get_logger("rousseau.web")

Handler = Callable[[Request, Login], Awaitable[Response]]
LIVE_EVERY = 1.0
"""Seconds between two looks at what the live parts of the pages show."""
KEEPALIVE = 15.0
"""Seconds between two comments on an idle event stream (proxies close silent ones)."""
MAX_MESSAGE = 32_000
"""Characters one web chat message may have."""
MAX_FILES = 10
"""Files one web chat message may carry (their sizes and types: media: in the config)."""


def templates() -> Jinja2Templates:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, enable_async=False
    )
    found = Jinja2Templates(env=env)
    found.env.filters["when"] = _when
    found.env.filters["visible"] = visible
    return found


def _when(ts: float | None) -> str:
    if not ts:
        return "—"
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def guarded(
    kind: Literal["page", "call"], role: Literal["owner", "chat"] = "owner"
) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    """A route for logged-in people only: a page redirects a stranger to /login, anything
    else answers 401; a POST without the login's CSRF token (form field `csrf` or header
    X-CSRF-Token) is refused."""

    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        @functools.wraps(handler)
        async def endpoint(request: Request) -> Response:
            face: Face = request.app.state.face
            assert face.logins is not None
            login = face.logins.get(request.cookies.get(COOKIE))
            if login is None:
                if kind == "page" and request.method == "GET":
                    return RedirectResponse("/login", status_code=303)
                return PlainTextResponse("log in first\n", status_code=401)
            if role == "owner" and not login.owner:
                return PlainTextResponse("for the owner only\n", status_code=403)
            if request.method == "POST":
                sent: Any = request.headers.get("x-csrf-token")
                if sent is None:
                    sent = (await request.form()).get("csrf")
                if not isinstance(sent, str) or not same(sent, login.csrf):
                    log.warning("web.csrf_refused", path=request.url.path)
                    return PlainTextResponse("missing or wrong CSRF token\n", status_code=403)
            return await handler(request, login)

        return endpoint

    return wrap


def render(request: Request, login: Login | None, name: str, **context: Any) -> Response:
    face: Face = request.app.state.face
    return request.app.state.templates.TemplateResponse(  # type: ignore[no-any-return]
        request,
        name,
        {"login": login, "csrf": login.csrf if login else "", "chat_on": face.chat is not None}
        | context,
    )


def _backend(request: Request) -> Backend:
    backend = request.app.state.face.backend
    assert backend is not None
    return backend  # type: ignore[no-any-return]


def back(request: Request, to: str, note: str = "") -> Response:
    """After an action: back to the page (303, so a reload does not post again)."""
    target = f"{to}?{urlencode({'note': note})}" if note else to
    return RedirectResponse(target, status_code=303)


# -- overview, transports, live updates -------------------------------------------------------


def transports(face: Face) -> list[dict[str, Any]]:
    rows = []
    for name, state in sorted(face.health().items()):
        rows.append(
            {
                "name": name,
                "connected": state["connected"],
                "stopped": state.get("stopped", ""),
                "error": face.errors.get(name, ""),
            }
        )
    return rows


def approvals(face: Face) -> list[dict[str, str]]:
    if face.approvals is None:
        return []
    return [
        {
            "code": code,
            "tool": waiting.request.tool,
            "input": preview(waiting.request.tool, waiting.request.input),
            "session": waiting.request.session_id,
            "owners": ", ".join(sorted(waiting.owners)),
        }
        for code, waiting in list(face.approvals.pending.items())
        if not waiting.done.is_set()
    ]


async def _live(face: Face, backend: Backend) -> dict[str, dict[str, Any]]:
    """What each live part of the pages shows now: its template and context."""
    return {
        "transports": {"transports": transports(face)},
        "approvals": {"approvals": approvals(face)},
        "pairings": {"codes": await backend.state.pairing_codes()},
    }


@guarded("page")
async def overview(request: Request, login: Login) -> Response:
    face: Face = request.app.state.face
    live = await _live(face, _backend(request))
    count, usage = await _backend(request).store.totals()
    return render(request, login, "index.html", **_merged(live), sessions=count, usage=usage)


def _merged(live: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for context in live.values():
        out |= context
    return out


@guarded("call")
async def live(request: Request, login: Login) -> Response:
    """Server-sent events: a live part's new HTML (rendered here, escaped) when it changes."""
    face: Face = request.app.state.face
    backend = _backend(request)
    page = request.app.state.templates

    async def events() -> AsyncIterator[str]:
        shown: dict[str, str] = {}
        quiet = 0.0
        while _still_in(request):
            for part, context in (await _live(face, backend)).items():
                html = page.get_template(f"_{part}.html").render(csrf=login.csrf, **context)
                digest = hashlib.sha256(html.encode()).hexdigest()
                if shown.get(part) != digest:
                    shown[part] = digest
                    quiet = 0.0
                    yield f"event: {part}\ndata: {dumps({'html': html})}\n\n"
            quiet += LIVE_EVERY
            if quiet >= KEEPALIVE:
                quiet = 0.0
                yield ": still here\n\n"
            await anyio.sleep(LIVE_EVERY)

    return _stream(events())


def _still_in(request: Request) -> bool:
    """Whether the login behind an open event stream still holds (not logged out)."""
    face: Face = request.app.state.face
    assert face.logins is not None
    return face.logins.get(request.cookies.get(COOKIE)) is not None


def _stream(events: AsyncIterator[str]) -> Response:
    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


# -- pairings and approvals ---------------------------------------------------------------


@guarded("page")
async def pairings(request: Request, login: Login) -> Response:
    codes = await _backend(request).state.pairing_codes()
    return render(request, login, "pairings.html", codes=codes, note=_note(request))


@guarded("call")
async def pairing_answer(request: Request, login: Login) -> Response:
    code, verb = request.path_params["code"], request.path_params["verb"]
    if verb not in ("approve", "reject"):
        return PlainTextResponse("not found\n", status_code=404)
    state = _backend(request).state
    done = await (state.approve(code) if verb == "approve" else state.reject(code))
    if done is None:
        return back(request, "/pairings", f"no code {code} waiting")
    log.info("web.pairing", code=code, verb=verb, by=login.user)
    verb_done = "approved" if verb == "approve" else "rejected"
    return back(request, "/pairings", f"{verb_done} {done.transport} {visible(done.sender_id)}")


@guarded("page")
async def approvals_page(request: Request, login: Login) -> Response:
    face: Face = request.app.state.face
    return render(request, login, "approvals.html", approvals=approvals(face), note=_note(request))


@guarded("call")
async def approval_answer(request: Request, login: Login) -> Response:
    face: Face = request.app.state.face
    code, verb = request.path_params["code"], request.path_params["verb"]
    if verb not in ("approve", "deny"):
        return PlainTextResponse("not found\n", status_code=404)
    settled = face.approvals is not None and face.approvals.decide(
        code, verb == "approve", f"web:{login.user}"
    )
    if not settled:
        return back(request, "/approvals", f"no approval {code} waiting")
    return back(request, "/approvals", f"{'approved' if verb == 'approve' else 'denied'} {code}")


# -- sessions, audit, usage ---------------------------------------------------------------


@guarded("page")
async def sessions(request: Request, login: Login) -> Response:
    store = _backend(request).store
    query = request.query_params.get("q", "").strip()
    hits = await store.search(query, limit=50) if query else []
    listed = [] if query else await store.list_sessions(limit=200)
    return render(
        request,
        login,
        "sessions.html",
        query=query,
        hits=hits,
        sessions=listed,
        note=_note(request),
    )


@guarded("page")
async def session(request: Request, login: Login) -> Response:
    store = _backend(request).store
    session_id = request.path_params["id"]
    found = await store.load(session_id)
    info = await store.info(session_id)
    if found is None or info is None:
        return PlainTextResponse("no such session\n", status_code=404)
    messages = [_shown(m) for m in found.messages]
    return render(request, login, "session.html", info=info, messages=messages)


def _shown(message: Any) -> dict[str, Any]:
    """A message as the session page lists it: its text, tool calls and results."""
    blocks = []
    for c in message.content:
        if c.kind is ContentKind.TEXT:
            blocks.append({"kind": "text", "text": c.text})
        elif c.kind is ContentKind.TOOL_USE and c.tool_use is not None:
            blocks.append(
                {"kind": "call", "text": preview(c.tool_use.name, c.tool_use.input),
                 "tool": c.tool_use.name}
            )  # fmt: skip
        elif c.kind is ContentKind.TOOL_RESULT and c.tool_result is not None:
            kind = "error" if c.tool_result.is_error else "result"
            blocks.append({"kind": kind, "text": c.tool_result.content[:4000]})
        elif c.attachment is not None:
            blocks.append({"kind": "file", "text": c.attachment.stand_in()})
    return {"role": message.role.value, "blocks": blocks}


@guarded("call")
async def session_delete(request: Request, login: Login) -> Response:
    session_id = request.path_params["id"]
    deleted = await _backend(request).store.delete_session(session_id)
    log.info("web.session_deleted", session=session_id, by=login.user, found=deleted)
    return back(request, "/sessions", f"deleted {session_id}" if deleted else "no such session")


@guarded("page")
async def audit(request: Request, login: Login) -> Response:
    params = request.query_params
    session_id = params.get("session") or None
    calls = await _backend(request).store.tool_calls(limit=500, session_id=session_id)
    tool, decision = params.get("tool", ""), params.get("decision", "")
    calls = [
        c
        for c in calls
        if (not tool or c.tool == tool) and (not decision or c.decision == decision)
    ][:200]
    return render(
        request,
        login,
        "audit.html",
        calls=calls,
        tool=tool,
        decision=decision,
        session=session_id or "",
    )


@guarded("page")
async def usage(request: Request, login: Login) -> Response:
    from rousseau.costs.report import spending_page

    listed = await _backend(request).store.list_sessions(limit=1000)
    days: dict[str, list[int]] = {}
    for info in listed:
        day = datetime.date.fromtimestamp(info.updated_at).isoformat()
        totals = days.setdefault(day, [0, 0, 0])
        totals[0] += 1
        totals[1] += info.usage.input_tokens
        totals[2] += info.usage.output_tokens
    return render(
        request,
        login,
        "usage.html",
        sessions=listed,
        days=sorted(days.items(), reverse=True),
        spending=await spending_page(request.app.state.face.meter),
    )


# -- cron -----------------------------------------------------------------------------------


@guarded("page")
async def cron(request: Request, login: Login) -> Response:
    jobs = await _backend(request).jobs.all()
    return render(request, login, "cron.html", jobs=jobs, note=_note(request))


@guarded("call")
async def cron_add(request: Request, login: Login) -> Response:
    from rousseau.cron import CronJobs
    from rousseau.cron.schedule import parse_schedule

    face: Face = request.app.state.face
    form = await request.form()
    values = {k: str(form.get(k, "")).strip() for k in ("name", "schedule", "prompt", "to")}
    if not all(values.values()):
        return back(request, "/cron", "name, schedule, prompt and deliver-to are all needed")
    try:
        parse_schedule(values["schedule"], face.cron_timezone)
        job = await CronJobs(_backend(request).jobs).add(
            values["name"],
            values["schedule"],
            values["prompt"],
            values["to"],
            timezone=face.cron_timezone,
        )
    except (RousseauError, ValueError) as exc:
        return back(request, "/cron", str(exc))
    if face.scheduler is not None:
        face.scheduler.wake()
    log.info("web.cron_added", job=job.name, by=login.user)
    return back(request, "/cron", f"added {job.name}")


@guarded("call")
async def cron_act(request: Request, login: Login) -> Response:
    from rousseau.cron import CronJobs

    face: Face = request.app.state.face
    jobs = CronJobs(_backend(request).jobs)
    key, verb = request.path_params["id"], request.path_params["verb"]
    if verb not in ("enable", "disable", "run"):
        return PlainTextResponse("not found\n", status_code=404)
    try:
        job = await jobs.get(key)
        if verb == "run":
            scheduler = face.scheduler
            if scheduler is None or face.background is None:
                return back(request, "/cron", "cron is not running here")
            face.background(functools.partial(scheduler.run_now, job))
            note = f"started {job.name}"
        else:
            job = await jobs.set_enabled(key, verb == "enable")
            if face.scheduler is not None:
                face.scheduler.wake()
            note = f"{verb}d {job.name}"
    except RousseauError as exc:
        return back(request, "/cron", str(exc))
    log.info("web.cron", job=job.name, verb=verb, by=login.user)
    return back(request, "/cron", note)


# -- web chat -------------------------------------------------------------------------------


def _chat_id(login: Login) -> str:
    return login.user


@guarded("page", role="chat")
async def chat_page(request: Request, login: Login) -> Response:
    face: Face = request.app.state.face
    if face.chat is None:
        return PlainTextResponse("the web chat is off\n", status_code=404)
    backend = _backend(request)
    messages: list[dict[str, Any]] = []
    session_id = await backend.state.session_for(f"{face.chat.name}:{_chat_id(login)}")
    if session_id is not None:
        found = await backend.store.load(session_id)
        if found is not None:
            for m in found.messages[-100:]:
                text = "\n".join(
                    c.attachment.stand_in() if c.attachment is not None else c.text
                    for c in m.content
                    if c.kind is ContentKind.TEXT or c.attachment is not None
                )
                if text and m.role.value in ("user", "assistant"):
                    messages.append({"role": m.role.value, "text": text})
    return render(request, login, "chat.html", messages=messages)


@guarded("call", role="chat")
async def chat_send(request: Request, login: Login) -> Response:
    face: Face = request.app.state.face
    if face.chat is None:
        return PlainTextResponse("the web chat is off\n", status_code=404)
    form = await request.form(max_files=MAX_FILES)
    text = str(form.get("text", "")).strip()
    files = [_upload(f) for f in form.getlist("file") if isinstance(f, UploadFile) and f.filename]
    if (not text and not files) or len(text) > MAX_MESSAGE:
        return PlainTextResponse(f"a message is 1 to {MAX_MESSAGE} characters\n", status_code=400)
    try:
        message_id = await face.chat.say(_chat_id(login), login.user, text, files=files)
    except Exception as exc:  # not persisted: the page says so and keeps the text
        log.warning("web.chat_failed", error=str(exc))
        return PlainTextResponse("not sent: try again\n", status_code=503)
    return Response(dumps({"id": message_id}), media_type="application/json")


def _upload(upload: UploadFile) -> Incoming:
    """An uploaded file as the media intake takes it in (the limits see its size first)."""

    async def fetch(into: Download) -> None:
        await upload.seek(0)
        while chunk := await upload.read(CHUNK):
            await into.write(chunk)

    return Incoming(
        name=upload.filename or "upload",
        media_type=upload.content_type or "application/octet-stream",
        size=upload.size,
        fetch=fetch,
    )


@guarded("call", role="chat")
async def chat_events(request: Request, login: Login) -> Response:
    face: Face = request.app.state.face
    if face.chat is None:
        return PlainTextResponse("the web chat is off\n", status_code=404)
    chat = face.chat

    async def events() -> AsyncIterator[str]:
        async with chat.listen(_chat_id(login)) as received:
            yield ": listening\n\n"
            while True:
                with anyio.move_on_after(KEEPALIVE) as idle:
                    event = await received.receive()
                if idle.cancelled_caught:
                    if not _still_in(request):
                        return
                    yield ": still here\n\n"
                    continue
                data = {
                    "id": event.id,
                    "text": event.text,
                    "final": event.kind == "message",
                    "buttons": list(event.buttons),
                    "audio": event.audio,
                }
                yield f"event: {event.kind}\ndata: {dumps(data)}\n\n"

    return _stream(events())


@guarded("call", role="chat")
async def chat_voice(request: Request, login: Login) -> Response:
    """A voice note sent to the asker's own chat, for the page to play."""
    face: Face = request.app.state.face
    sha256 = request.path_params["sha256"]
    found = None
    if face.chat is not None and re.fullmatch(r"[0-9a-f]{64}", sha256):
        found = await face.chat.voice_note(_chat_id(login), sha256)
    if found is None:
        return PlainTextResponse("no such voice note\n", status_code=404)
    return Response(found, media_type="audio/ogg", headers={"Cache-Control": "private"})


def _note(request: Request) -> str:
    return request.query_params.get("note", "")[:200]


def routes() -> list[Route]:
    return [
        Route("/", overview),
        Route("/live", live),
        Route("/pairings", pairings),
        Route("/pairings/{code}/{verb}", pairing_answer, methods=["POST"]),
        Route("/approvals", approvals_page),
        Route("/approvals/{code}/{verb}", approval_answer, methods=["POST"]),
        Route("/sessions", sessions),
        Route("/sessions/{id}", session),
        Route("/sessions/{id}/delete", session_delete, methods=["POST"]),
        Route("/audit", audit),
        Route("/usage", usage),
        Route("/cron", cron),
        Route("/cron/add", cron_add, methods=["POST"]),
        Route("/cron/{id}/{verb}", cron_act, methods=["POST"]),
        Route("/chat", chat_page),
        Route("/chat/send", chat_send, methods=["POST"]),
        Route("/chat/events", chat_events),
        Route("/chat/voice/{sha256}", chat_voice),
    ]
