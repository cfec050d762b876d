"""The memory tool on a real store: whose profile a turn changes (a private chat's sender,
the terminal's person; nobody in a group or a cron job), entries named by their text or a
unique part of it, the bound and its advice, and the profile as the system prompt shows it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from rousseau.agent import Session, ToolCall, ToolOutput
from rousseau.messages import LOCAL_USER, Inbound, current_inbound, turn_person
from rousseau.state import Store
from rousseau.state.sqlite_profiles import SqliteProfiles
from rousseau.tools.memory import HEADER, MAX_ENTRY, MemoryTool

pytestmark = pytest.mark.anyio
CALL = ToolCall(session_id="s", tool_use_id="t")


def inbound(sender: str = "42", *, group: bool = False) -> Inbound:
    return Inbound(
        transport="telegram",
        chat_id="g1" if group else sender,
        sender_id=sender,
        message_id="m",
        text="hi",
        is_group=group,
    )


@contextmanager
def answering(message: Inbound | None = None, person: str | None = None) -> Iterator[None]:
    """A turn answering `message` (as the router runs one), or `person` (the terminal)."""
    a, b = current_inbound.set(message), turn_person.set(person)
    try:
        yield
    finally:
        current_inbound.reset(a)
        turn_person.reset(b)


@pytest.fixture
async def profiles() -> AsyncIterator[SqliteProfiles]:
    store = Store(":memory:")
    yield SqliteProfiles(store)
    store.close()


async def call(tool: MemoryTool, **input: Any) -> ToolOutput:
    problem = tool.validate(input)
    assert problem is None, problem
    return await tool.execute(input, CALL)


async def kept(
    profiles: SqliteProfiles, person: str = "telegram:42", agent: str = "default"
) -> list[str]:
    return [e.text for e in await profiles.entries(agent=agent, person=person)]


async def test_add_replace_and_remove_by_text_or_a_unique_part(profiles: SqliteProfiles) -> None:
    tool = MemoryTool(profiles, agent="default", max_chars=2000)
    with answering(inbound()):
        added = await call(tool, action="add", text="  Prefers\n tea   to coffee ")
        assert not added.is_error and "added: Prefers tea to coffee" in added.content
        assert "1 entry, 21 of 2,000 characters" in added.content
        await call(tool, action="add", text="Lives in Lyon")
        again = await call(tool, action="add", text="Lives in Lyon")
        assert not again.is_error and "already kept" in again.content
        replaced = await call(tool, action="replace", old="lyon", text="Lives in Paris since May")
        assert not replaced.is_error and "Lives in Lyon -> Lives in Paris" in replaced.content
        assert await kept(profiles) == ["Prefers tea to coffee", "Lives in Paris since May"]
        await call(tool, action="add", text="Prefers short answers")
        both = await call(tool, action="remove", old="Prefers")
        assert both.is_error and "2 entries contain 'Prefers'" in both.content
        missing = await call(tool, action="remove", old="Berlin")
        assert missing.is_error and "- Lives in Paris since May" in missing.content
        removed = await call(tool, action="remove", old="Prefers short answers")
        assert not removed.is_error and "2 entries" in removed.content
        assert (await call(tool, action="replace", text="x")).is_error  # which one?
        assert (await call(tool, action="add")).is_error  # no text
    assert await kept(profiles) == ["Prefers tea to coffee", "Lives in Paris since May"]


async def test_the_bound_is_an_error_that_says_to_consolidate(profiles: SqliteProfiles) -> None:
    tool = MemoryTool(profiles, agent="default", max_chars=120)
    with answering(inbound()):
        assert not (await call(tool, action="add", text="a" * 100)).is_error
        full = await call(tool, action="add", text="b" * 30)
        assert full.is_error and "full (100 of 120 characters used)" in full.content
        assert "consolidate" in full.content and "replace" in full.content
        grown = await call(tool, action="replace", old="aaa", text="c" * 121)
        assert grown.is_error and "full" in grown.content
        long = await call(tool, action="add", text="d" * (MAX_ENTRY + 1))
        assert long.is_error and f"at most {MAX_ENTRY} characters" in long.content
        merged = await call(tool, action="replace", old="aaa", text="a and b, briefly")
        assert not merged.is_error
        assert not (await call(tool, action="add", text="b" * 30)).is_error
    assert await kept(profiles) == ["a and b, briefly", "b" * 30]


async def test_each_turn_changes_only_its_own_persons_profile(profiles: SqliteProfiles) -> None:
    default = MemoryTool(profiles, agent="default", max_chars=2000)
    work = MemoryTool(profiles, agent="work", max_chars=2000)
    with answering(inbound("42")):
        await call(default, action="add", text="alice likes tea")
        await call(work, action="add", text="alice runs billing")
    with answering(inbound("43")):
        await call(default, action="add", text="bob has a cat")
        foreign = await call(default, action="remove", old="alice likes tea")
        assert foreign.is_error  # alice's entry is not in bob's profile
    with answering(person=LOCAL_USER):
        await call(default, action="add", text="the owner is at the terminal")
    assert await kept(profiles) == ["alice likes tea"]
    assert await kept(profiles, agent="work") == ["alice runs billing"]
    assert await kept(profiles, "telegram:43") == ["bob has a cat"]
    assert await kept(profiles, LOCAL_USER) == ["the owner is at the terminal"]
    with answering(inbound("42")):
        alice = await default.section.appendix(Session(id="s"))
    assert alice.startswith(HEADER) and "alice likes tea" in alice
    assert "bob" not in alice and "billing" not in alice and "terminal" not in alice


async def test_a_group_or_a_cron_job_has_no_profile(profiles: SqliteProfiles) -> None:
    tool = MemoryTool(profiles, agent="default", max_chars=2000)
    with answering(inbound("42")):
        await call(tool, action="add", text="alice likes tea")
    with answering(inbound("42", group=True)):
        group = await call(tool, action="add", text="said in the group")
        assert group.is_error and "group chat" in group.content
        assert await tool.section.appendix(Session(id="s")) == ""  # the group reads nothing
    with answering():
        cron = await call(tool, action="add", text="said in a job")
        assert cron.is_error and "answers no one" in cron.content
        assert await tool.section.appendix(Session(id="s")) == ""
    assert await profiles.entries() != [] and await kept(profiles) == ["alice likes tea"]


async def test_an_empty_profile_adds_nothing_to_the_prompt(profiles: SqliteProfiles) -> None:
    tool = MemoryTool(profiles, agent="default", max_chars=2000)
    with answering(inbound("42")):
        assert await tool.section.appendix(Session(id="s")) == ""
        await call(tool, action="add", text="likes tea")
        shown = await tool.section.appendix(Session(id="s"))
    [line] = shown.splitlines()[1:]
    assert line.startswith("- [20") and line.endswith("] likes tea")  # dated


class Counting(SqliteProfiles):
    """Profiles that count how often they were read."""

    reads = 0

    async def entries(self, *, agent: str | None = None, person: str | None = None) -> Any:
        self.reads += 1
        return await super().entries(agent=agent, person=person)


async def test_a_turn_reads_the_profile_once_unless_it_writes_to_it() -> None:
    """The loop asks at every model call; the store is asked once a turn, and again after
    the memory tool changed the profile."""
    from rousseau.agent import Message

    store = Store(":memory:")
    profiles = Counting(store)
    tool = MemoryTool(profiles, agent="default", max_chars=2000)
    session = Session(id="s", messages=[Message.user("hello")])
    with answering(inbound("42")):
        await call(tool, action="add", text="likes tea")
        profiles.reads = 0
        for _ in range(5):  # five model calls of one turn
            assert "likes tea" in await tool.section.appendix(session)
        assert profiles.reads == 1
        await call(tool, action="add", text="lives in Lyon")  # a tool call of this turn
        profiles.reads = 0
        assert "lives in Lyon" in await tool.section.appendix(session)
        await tool.section.appendix(session)
        assert profiles.reads == 1
        # changed elsewhere (/forget, the dashboard): the next turn sees it
        [tea, _] = await profiles.entries(agent="default", person="telegram:42")
        await profiles.remove_entry(tea.id)
        session.messages += [Message.assistant("hi"), Message.user("hello")]
        assert "likes tea" not in await tool.section.appendix(session)
    store.close()
