"""Matrix sync bodies looked at before matrix-nio parses them: one event it cannot parse would
fail the whole sync, and the same sync would be asked for again, forever."""

from __future__ import annotations

from typing import Any

import nio

from rousseau.transports.unreadable import Named, refuse


class SyncChecked(nio.AsyncClient):  # type: ignore[misc]  # nio is untyped where not installed
    """nio's client, each sync's room events looked at before nio parses them: one it could
    not parse (not an object, no integer timestamp, no content) would fail the whole sync,
    and the same sync would be asked for again, forever. Such an event is recorded and
    dropped."""

    transport: Named | None = None
    """Whose events these are (what is dropped is recorded as that transport's)."""

    async def parse_body(self, transport_response: Any) -> dict[Any, Any]:
        body: dict[Any, Any] = await super().parse_body(transport_response)
        if isinstance(body, dict) and "next_batch" in body and self.transport is not None:
            drop_unparsable(self.transport, body)
        return body


def drop_unparsable(transport: Named, sync: dict[str, Any]) -> None:
    """Remove, from the joined and left rooms of a sync's body, the timeline and state
    events nio cannot parse (each recorded as failed)."""
    rooms = sync.get("rooms")
    for kind in ("join", "leave"):
        found = rooms.get(kind) if isinstance(rooms, dict) else None
        for room_id, info in found.items() if isinstance(found, dict) else ():
            for part in ("timeline", "state"):
                section = info.get(part) if isinstance(info, dict) else None
                if isinstance(section, dict) and isinstance(section.get("events"), list):
                    kept = [e for e in section["events"] if _parsable(transport, room_id, e)]
                    section["events"] = kept


def _parsable(transport: Named, room_id: str, event: Any) -> bool:
    """Whether nio can parse `event` (what it fails on, found by tests/fuzz); if not, it
    is recorded as failed."""
    if not isinstance(event, dict):
        why = f"an event of {type(event).__name__}, not an object"
    elif isinstance(event.get("origin_server_ts"), bool) or not isinstance(
        event.get("origin_server_ts"), int
    ):
        why = "no integer origin_server_ts"
    elif not isinstance(event.get("content"), dict):
        why = "no content object"
    else:
        return True
    where = event.get("event_id") if isinstance(event, dict) else None
    refuse(transport, why, room=room_id, message=where if isinstance(where, str) else None)
    return False
