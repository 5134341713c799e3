"""Built-in Conversation, Task and Session (issue 14 item 2): LangChain conversion both
ways without loss, and O(1) bytes written per appended message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_to_dict,
)
from pydantic import BaseModel

from statekeeper import StateStore
from statekeeper.errors import InvalidArgument, ValidationError
from statekeeper.schema import registry
from statekeeper.schema.structures import (
    Conversation,
    Message,
    Session,
    StepStatus,
    Task,
    TaskStatus,
)

texts = st.text(max_size=30)
ids = st.none() | st.text(min_size=1, max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
kwargs = st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=2)
contents = texts | st.lists(
    texts | st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=3
)
calls = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.text(min_size=1, max_size=8),
            "args": st.dictionaries(st.text(max_size=4), json_values, max_size=2),
            "id": st.text(min_size=1, max_size=6),
        }
    ),
    max_size=2,
)
lc_messages = st.one_of(
    st.builds(
        HumanMessage, content=contents, id=ids, name=st.none() | texts, additional_kwargs=kwargs
    ),
    st.builds(SystemMessage, content=contents, id=ids),
    st.builds(
        AIMessage,
        content=contents,
        id=ids,
        tool_calls=calls,
        response_metadata=kwargs,
        usage_metadata=st.none()
        | st.builds(
            lambda i, o: {"input_tokens": i, "output_tokens": o, "total_tokens": i + o},
            st.integers(0, 99),
            st.integers(0, 99),
        ),
    ),
    st.builds(
        ToolMessage,
        content=contents,
        tool_call_id=st.text(min_size=1, max_size=6),
        artifact=json_values,
        status=st.sampled_from(["success", "error"]),
    ),
    st.builds(ChatMessage, content=contents, role=st.text(min_size=1, max_size=8)),
    st.builds(FunctionMessage, content=texts, name=st.text(min_size=1, max_size=8)),
    st.builds(AIMessageChunk, content=texts, id=ids),
)


@settings(max_examples=150, deadline=None)
@given(message=lc_messages)
def test_langchain_messages_convert_without_loss(message: BaseMessage) -> None:
    ours = Message.from_langchain(message)
    back = ours.to_langchain()
    assert type(back) is type(message)
    assert message_to_dict(back) == message_to_dict(message)
    # and ours survives the trip through the store's JSON and back
    stored = Message.model_validate_json(ours.model_dump_json())
    assert Message.from_langchain(stored.to_langchain()) == ours


@settings(max_examples=80, deadline=None)
@given(
    role=st.sampled_from(["user", "assistant", "system", "tool", "function", "critic"]),
    content=contents,
    tokens=st.none() | st.integers(0, 10_000),
    metadata=kwargs,
)
def test_our_messages_convert_to_langchain_and_back_without_loss(
    role: str,
    content: str | list[str | dict[str, str]],
    tokens: int | None,
    metadata: dict[str, object],
) -> None:
    extra = {"tool_call_id": "c1"} if role == "tool" else {}
    name = {"name": "fn"} if role == "function" else {}
    ours = Message(
        role=role,
        content=content,
        tokens=tokens,
        metadata=metadata,
        created_at=1.5,
        **extra,
        **name,
    )
    assert Message.from_langchain(ours.to_langchain()) == ours


def test_a_conversation_keeps_roles_tool_calls_results_tokens_and_summaries() -> None:
    c = Conversation()
    c.add("user", "weather in Paris?", tokens=5)
    call = c.append(
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}])
    )
    assert c.pending_tool_calls()[0].name == "weather" and call.role == "assistant"
    c.append(ToolMessage("18C", tool_call_id="c1"))
    c.add("assistant", "18C and sunny", tokens=4)
    assert c.pending_tool_calls() == [] and c.result_of("c1").text == "18C"  # type: ignore[union-attr]
    assert c.tokens == 9
    c.trim(keep=1, summary="asked about the weather", tokens=3)
    assert len(c) == 1 and c.trimmed == 3 and c.tokens == 7
    lc = c.to_langchain(with_summaries=True)
    assert isinstance(lc[0], SystemMessage) and "weather" in str(lc[0].content)
    assert Conversation.from_langchain(c.to_langchain()).messages == c.messages
    with pytest.raises(InvalidArgument):
        c.append(42)  # type: ignore[arg-type]


class Chat(BaseModel):
    conversation: Conversation = Conversation()
    session: Session | None = None


async def test_appending_a_message_writes_o1_bytes() -> None:
    """The event for one appended message is as large at 1,000 messages as at 10."""
    async with StateStore("memory://", snapshot_every=10_000, snapshot_bytes=None) as store:
        sizes = {}
        for n in (10, 1000):
            chat = Chat()
            for i in range(n):
                chat.conversation.add("user", f"message {i:05d}", tokens=3, created_at=1.0)
            agent = await store.agent(f"c-{n}", model=Chat, initial_state=chat)
            agent.state.conversation.add("assistant", "one more", tokens=2, created_at=2.0)
            await agent.save()
            (raw,) = await store.backend.read(f"c-{n}", 1, 2)
            sizes[n] = len(raw.payload)
            (event,) = [e async for e in store.history(f"c-{n}", after_seq=1)]
            assert [(op["op"], op["path"]) for op in event.ops] == [
                ("add", "/conversation/messages/-")
            ]
        assert sizes[10] == sizes[1000] < 400, sizes


async def test_a_conversation_agent_and_a_chat_model_round_trip_through_the_store() -> None:
    async with StateStore("memory://") as store:
        agent = await store.agent("c-1", model=Conversation)
        agent.state.append(HumanMessage("hi", id="m1"))
        agent.state.add("assistant", "hello", tokens=2)
        await agent.save()
        again = await store.agent("c-1", model=Conversation)
        assert again.state == agent.state
        assert (await store.load("c-1")).data["$model"] == "statekeeper.Conversation"
        again.state.messages[0].role = ""
        with pytest.raises(ValidationError, match=r"messages\[0\]\.role"):
            await again.save()
        await again.refresh()
    assert {"statekeeper.Conversation", "statekeeper.Task", "statekeeper.Session"} <= {
        s.name for s in registry
    }


def test_task_plan_steps_results_errors_and_retries() -> None:
    task = Task(goal="ship", max_retries=1)
    task.plan("build", "deploy")
    task.start("1")
    task.complete("1", {"artifact": "a.whl"})
    task.start("2")
    assert task.fail("2", "timeout") is True and task.next_step().id == "2"  # type: ignore[union-attr]
    task.start("2")
    assert task.fail("2", RuntimeError("boom")) is False
    assert task.status is TaskStatus.FAILED and task.step("2").status is StepStatus.FAILED
    assert [(e.step, e.attempt, e.kind) for e in task.errors] == [
        ("2", 1, None),
        ("2", 2, "RuntimeError"),
    ]
    assert task.retries == 1 and task.progress == (1, 2)
    with pytest.raises(InvalidArgument):
        task.step("9")
    with pytest.raises(InvalidArgument):
        task.add_step("again", id="1")
    done = Task(goal="g")
    done.plan("a")
    done.start("1")
    done.complete("1")
    assert done.done and done.status is TaskStatus.DONE
    assert Task.model_validate_json(task.model_dump_json()) == task


def test_session_times_and_ttl() -> None:
    s = Session(
        user_id="u",
        channel="slack",
        started_at=10.0,
        last_seen=10.0,
        ttl=5,
        preferences={"lang": "fr"},
    )
    assert not s.expired(now=14.9) and s.expired(now=15.0)
    s.touch(now=20.0)
    assert s.expires_at == 25.0 and not s.expired(now=24.0)
    assert Session(user_id="u").expires_at is None
    with pytest.raises(Exception, match="last_seen"):
        Session(user_id="u", started_at=10.0, last_seen=5.0)
