"""The OpenAI-compatible API, as the official openai SDK uses it: a plain and a streamed
completion from an agent that calls a tool, models, keys, and owners kept apart."""

from __future__ import annotations

import pytest

from tests.web.conftest import ALICE_KEY, BOB_KEY, WebDaemon

openai = pytest.importorskip("openai")


def _client(daemon: WebDaemon, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=daemon.url + "/v1", max_retries=0, timeout=30)


def test_models_lists_one_model_per_agent(web_daemon: WebDaemon) -> None:
    models = _client(web_daemon, ALICE_KEY).models.list()
    assert [m.id for m in models.data] == ["default"]


def test_a_plain_completion_from_an_agent_that_called_a_tool(web_daemon: WebDaemon) -> None:
    client = _client(web_daemon, ALICE_KEY)
    done = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "please use bash echo plain-tool-ran"}],
        user="plain",
    )
    assert done.choices[0].message.content == "the tool said: plain-tool-ran"
    assert done.choices[0].finish_reason == "stop"
    assert done.model == "default"
    # Both model requests of the turn (the tool call, then the answer), as the model reported
    assert done.usage is not None
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (20, 10)
    assert done.usage.total_tokens == 30
    audit = web_daemon.rousseau("audit")
    assert "bash" in audit.stdout  # the call went through the approver and the audit


def test_a_streamed_completion_from_an_agent_that_called_a_tool(web_daemon: WebDaemon) -> None:
    client = _client(web_daemon, ALICE_KEY)
    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "use bash echo streamed-tool-ran"}],
        stream=True,
        user="streamed",
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "the tool said: streamed-tool-ran"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)  # not asked for


def test_a_streamed_completion_reports_its_usage_when_asked(web_daemon: WebDaemon) -> None:
    client = _client(web_daemon, ALICE_KEY)
    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "use bash echo counted"}],
        stream=True,
        stream_options={"include_usage": True},
        user="counted",
    )
    chunks = list(stream)
    assert chunks[-2].choices[0].finish_reason == "stop"
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (20, 10)


def test_a_long_answer_streams_in_several_chunks(web_daemon: WebDaemon) -> None:
    client = _client(web_daemon, ALICE_KEY)
    stream = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "slowly"}], stream=True
    )
    deltas = [
        c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content
    ]
    assert "".join(deltas) == " ".join(f"word{i}" for i in range(40))
    assert len(deltas) >= 3  # it arrived as it was written, not in one piece


def test_a_conversation_continues_and_stays_its_owners(web_daemon: WebDaemon) -> None:
    alice, bob = _client(web_daemon, ALICE_KEY), _client(web_daemon, BOB_KEY)
    first = alice.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "my code word is tangerine"}],
        user="u1",
    )
    assert "tangerine" in (first.choices[0].message.content or "")
    again = alice.chat.completions.create(
        model="default", messages=[{"role": "user", "content": "what was it?"}], user="u1"
    )
    assert "tangerine" in (again.choices[0].message.content or "")  # the session kept it
    # Bob, with the same user id and the same header, gets a conversation of his own
    other = bob.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "what was it?"}],
        user="u1",
        extra_headers={"x-session-id": "u1"},
    )
    assert "tangerine" not in (other.choices[0].message.content or "")


def test_a_request_without_a_key_or_with_a_wrong_one_gets_401(web_daemon: WebDaemon) -> None:
    import httpx

    bare = httpx.post(
        web_daemon.url + "/v1/chat/completions",
        json={"model": "default", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert bare.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        _client(web_daemon, "rsk-wrong-0123456789abcdefghijklmn").chat.completions.create(
            model="default", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.AuthenticationError):
        _client(web_daemon, "rsk-wrong-0123456789abcdefghijklmn").models.list()


def test_an_unknown_model_and_a_bad_body_are_clear_errors(web_daemon: WebDaemon) -> None:
    client = _client(web_daemon, ALICE_KEY)
    with pytest.raises(openai.NotFoundError, match="offers default"):
        client.chat.completions.create(
            model="gpt-nothing", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.BadRequestError, match="no user message"):
        client.chat.completions.create(
            model="default", messages=[{"role": "system", "content": "only this"}]
        )
