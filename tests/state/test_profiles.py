"""People's profiles, one suite for both backends (SQLite, and a real PostgreSQL): entries
kept per agent and person in the order they were written, the bound checked where they are
written (also by writers racing each other), replace and remove confined to their profile."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from rousseau.state import Store
from rousseau.state.protocol import ProfileStore
from rousseau.state.sqlite_profiles import SqliteProfiles
from tests.postgres.server import Postgres

pytestmark = pytest.mark.anyio

ALICE = "telegram:42"
BOB = "telegram:43"


@pytest.fixture(params=["sqlite", "postgres"])
async def profiles(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ProfileStore]:
    if request.param == "sqlite":
        store = Store(tmp_path / "state.db")
        yield SqliteProfiles(store)
        store.close()
        return
    from rousseau.state.postgres import PostgresStore
    from rousseau.state.postgres_profiles import PostgresProfiles

    server: Postgres = request.getfixturevalue("postgres")
    pg = await PostgresStore.open(server.new_database())
    yield PostgresProfiles(pg)
    await pg.aclose()


async def texts(profiles: ProfileStore, agent: str = "default", person: str = ALICE) -> list[str]:
    return [e.text for e in await profiles.entries(agent=agent, person=person)]


async def test_entries_are_kept_per_agent_and_person_in_order(profiles: ProfileStore) -> None:
    for agent, person, text in [
        ("default", ALICE, "prefers tea"),
        ("default", BOB, "has a cat"),
        ("work", ALICE, "works on the billing service"),
        ("default", ALICE, "lives in Lyon"),
    ]:
        assert await profiles.add_entry(agent, person, text, max_chars=2000) == "done"
    assert await texts(profiles) == ["prefers tea", "lives in Lyon"]
    assert await texts(profiles, person=BOB) == ["has a cat"]
    assert await texts(profiles, agent="work") == ["works on the billing service"]
    everything = await profiles.entries()
    assert [(e.agent, e.person, e.text) for e in everything] == [
        ("default", ALICE, "prefers tea"),
        ("default", ALICE, "lives in Lyon"),
        ("default", BOB, "has a cat"),
        ("work", ALICE, "works on the billing service"),
    ]
    first = everything[0]
    assert first.created_at == first.updated_at > 0


async def test_the_bound_counts_every_entry_of_the_profile(profiles: ProfileStore) -> None:
    assert await profiles.add_entry("default", ALICE, "a" * 60, max_chars=100) == "done"
    assert await profiles.add_entry("default", ALICE, "b" * 41, max_chars=100) == "full"
    assert await profiles.add_entry("default", ALICE, "b" * 40, max_chars=100) == "done"
    assert await profiles.add_entry("default", ALICE, "c", max_chars=100) == "full"
    # another person's and another agent's profiles have their own room
    assert await profiles.add_entry("default", BOB, "d" * 100, max_chars=100) == "done"
    assert await profiles.add_entry("work", ALICE, "e" * 100, max_chars=100) == "done"
    assert await texts(profiles) == ["a" * 60, "b" * 40]


async def test_replace_may_shrink_a_profile_over_a_lowered_bound(profiles: ProfileStore) -> None:
    await profiles.add_entry("default", ALICE, "x" * 80, max_chars=200)
    await profiles.add_entry("default", ALICE, "y" * 80, max_chars=200)
    [x, y] = await profiles.entries(agent="default", person=ALICE)
    # the bound is now 100: growing is refused, shrinking (still over it) is allowed
    assert await profiles.replace_entry("default", ALICE, x.id, "x" * 81, max_chars=100) == "full"
    assert await profiles.replace_entry("default", ALICE, x.id, "x" * 30, max_chars=100) == "done"
    assert await texts(profiles) == ["x" * 30, "y" * 80]
    [x2, _] = await profiles.entries(agent="default", person=ALICE)
    assert x2.id == x.id and x2.created_at == x.created_at and x2.updated_at >= x.updated_at
    # an entry is replaced only within its own profile
    assert await profiles.replace_entry("default", BOB, y.id, "z", max_chars=100) == "gone"
    assert await profiles.replace_entry("work", ALICE, y.id, "z", max_chars=100) == "gone"
    assert await profiles.replace_entry("default", ALICE, 999_999, "z", max_chars=100) == "gone"
    assert await texts(profiles) == ["x" * 30, "y" * 80]


async def test_remove_is_confined_to_the_profile_named(profiles: ProfileStore) -> None:
    await profiles.add_entry("default", ALICE, "prefers tea", max_chars=2000)
    [entry] = await profiles.entries(agent="default", person=ALICE)
    assert await profiles.remove_entry(entry.id, agent="default", person=BOB) is None
    assert await profiles.remove_entry(entry.id, agent="work", person=ALICE) is None
    assert await texts(profiles) == ["prefers tea"]
    gone = await profiles.remove_entry(entry.id, agent="default", person=ALICE)
    assert gone is not None and gone.text == "prefers tea"
    assert await texts(profiles) == []
    assert await profiles.remove_entry(entry.id) is None
    await profiles.add_entry("default", BOB, "has a cat", max_chars=2000)
    [bobs] = await profiles.entries(person=BOB)
    owner_removed = await profiles.remove_entry(bobs.id)  # the owner's: any profile
    assert owner_removed is not None and await profiles.entries() == []


async def test_writers_racing_never_pass_the_bound(profiles: ProfileStore) -> None:
    """Twenty turns of one person (in several chats, or on several daemons) adding at once:
    only as many entries as fit are kept."""
    results: list[str] = []

    async def add(n: int) -> None:
        results.append(await profiles.add_entry("default", ALICE, f"{n:02d}" * 5, max_chars=55))

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(add, n)
    kept = await texts(profiles)
    assert results.count("done") == len(kept) == 5
    assert sum(map(len, kept)) <= 55
