"""The dashboard's Memory page: what each agent keeps about each person (their profiles),
every entry editable in place (within its profile's bound) and with a button that deletes
it. The person sees their own with /memory."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rousseau.config.sections import MemoryConfig
from rousseau.web.auth import Login
from rousseau.web.dashboard import _backend, _note, back, guarded, log, render

MAX_CHARS = MemoryConfig().max_chars  # an agent the config no longer names


@guarded("page")
async def memory(request: Request, login: Login) -> Response:
    params = request.query_params
    person, agent = params.get("person", "").strip(), params.get("agent", "").strip()
    entries = await _backend(request).profiles.entries(agent=agent or None, person=person or None)
    rows: list[dict[str, object]] = []
    numbers: dict[tuple[str, str], int] = {}
    for entry in entries:  # numbered within its profile, as /memory numbers them
        n = numbers[entry.agent, entry.person] = numbers.get((entry.agent, entry.person), 0) + 1
        rows.append({"n": n, "entry": entry})
    return render(
        request,
        login,
        "memory.html",
        rows=rows,
        profiles=len(numbers),
        person=person,
        agent=agent,
        note=_note(request),
    )


@guarded("call")
async def memory_delete(request: Request, login: Login) -> Response:
    key = request.path_params["id"]
    gone = await _backend(request).profiles.remove_entry(int(key)) if key.isdigit() else None
    log.info("web.profile_entry_deleted", entry=key, by=login.user, found=gone is not None)
    if gone is None:
        return back(request, "/memory", "no such entry")
    return back(request, "/memory", f"deleted from {gone.person}'s profile: {gone.text[:80]}")


@guarded("call")
async def memory_edit(request: Request, login: Login) -> Response:
    key = request.path_params["id"]
    text = " ".join(str((await request.form()).get("text", "")).split())
    profiles = _backend(request).profiles
    entry = next((e for e in await profiles.entries() if str(e.id) == key), None)
    if entry is None:
        return back(request, "/memory", "no such entry")
    if not text:
        return back(request, "/memory", "an entry needs text: Delete removes one")
    bound = request.app.state.face.profile_bounds.get(entry.agent, MAX_CHARS)
    done = await profiles.replace_entry(entry.agent, entry.person, entry.id, text, max_chars=bound)
    log.info("web.profile_entry_edited", entry=key, by=login.user, outcome=done)
    if done == "full":
        return back(
            request,
            "/memory",
            f"not changed: {entry.person}'s profile would pass {bound:,} characters",
        )
    if done == "gone":
        return back(request, "/memory", "no such entry")
    return back(request, "/memory", f"changed in {entry.person}'s profile: {text[:80]}")


def routes() -> list[Route]:
    return [
        Route("/memory", memory),
        Route("/memory/{id}/edit", memory_edit, methods=["POST"]),
        Route("/memory/{id}/delete", memory_delete, methods=["POST"]),
    ]
