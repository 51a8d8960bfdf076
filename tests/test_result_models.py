"""Every ``/rpc`` method and every MCP tool publishes the schema of its answer, generated from
its output model (a tool's ``outputSchema``, a method's result in the OpenRPC document that
``rpc.discover`` serves): a real call of each, on SQLite and PostgreSQL, answers what its
published schema allows and nothing else, checked by ``jsonschema`` (an outside validator), and
its params are what the OpenRPC document publishes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema
import orjson
import pytest

from ccweb_store.contract.objects import Run as RunOut
from ccweb_store.domain.context import Source
from ccweb_store.domain.rows import Run
from ccweb_store.protocol import mcp, openrpc
from ccweb_store.protocol.operation import dumped
from ccweb_store.protocol.registry import METHODS, TOOLS, get_tool
from ccweb_store.store.uow import Store
from tests import host_calls, tool_calls

TOOL_METHODS = ("tools.call", "tools.callDynamic")
DOCUMENT = {method["name"]: method for method in openrpc.document()["methods"]}


def check(schema: dict[str, Any], answer: Any) -> None:
    jsonschema.validate(answer, schema, cls=jsonschema.Draft202012Validator)


def check_params(method: str, params: dict[str, Any]) -> None:
    """``params`` hold only the document's params of ``method``, each as its schema says."""
    published = {param["name"]: param for param in DOCUMENT[method]["params"]}
    for name, value in params.items():
        assert name in published, (method, name)
        check(published[name]["schema"], value)
    for name, param in published.items():
        assert name in params or not param["required"], (method, name)


class CheckedCalls:
    """Calls methods and tools as the edges do, validating each answer with its model and
    noting which were called."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.methods: set[str] = set()
        self.tools: set[str] = set()

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> Any:
        check_params(method, params or {})
        answer = await host_calls.call(self.store, method, params or {})
        check(DOCUMENT[method]["result"]["schema"], answer)
        if method in TOOL_METHODS:
            assert params is not None
            check(get_tool(params["tool"]).output_schema, answer)
        self.methods.add(method)
        return answer

    async def tool(self, source: str, name: str, args: dict[str, Any]) -> Any:
        answer = await tool_calls.call(self.store, Source(source), name, args)
        check(get_tool(name).output_schema, answer)
        self.tools.add(name)
        return answer


async def test_every_method_and_tool_answers_as_its_model_says(store: Store) -> None:
    calls = CheckedCalls(store)
    rpc, tool = calls.rpc, calls.tool

    await rpc("session.create", {"id": "src", "title": "Source"})
    await rpc("session.create", {"id": "dst", "title": "Target", "agent": "codex"})
    await rpc("session.create", {"id": "spare"})
    await rpc("session.get", {"id": "src"})
    await rpc("session.list", {"limit": 2})
    await rpc("message.append", {"sessionId": "src", "role": "user", "content": "plan it"})
    await rpc("message.list", {"sessionId": "src"})
    await rpc("message.recent", {"sessionId": "src"})

    await tool("src", "ccweb_list_conversations", {})
    await tool("src", "ccweb_list_user_inputs", {})
    sent = await tool(
        "src",
        "ccweb_send_message",
        {"targetConversationId": "dst", "content": "do it", "replyMode": "return_and_continue"},
    )
    request_id = sent["requestId"]
    await tool("src", "ccweb_get_pending_reply", {})
    await tool("src", "ccweb_get_pending_reply", {"requestId": request_id})
    await rpc("operator.pendingReplies", {"sessionId": "src"})
    await rpc("operator.pendingReplies", {})

    claimed = await rpc(
        "run.claim", {"workerId": "w1", "withConversation": True, "mintCredential": {}}
    )
    assert "conversation" in claimed and "credential" in claimed
    run_id = claimed["run"]["id"]
    await rpc("run.heartbeat", {"runId": run_id, "workerId": "w1"})
    await rpc(
        "run.complete",
        {
            "runId": run_id,
            "status": "completed",
            "output": "done",
            "workerId": "w1",
            "agentSessionId": "thread-1",
        },
    )
    await rpc("reply.get", {"requestId": request_id})
    await rpc("reply.list", {})
    await rpc("operator.replyStory", {"requestId": request_id})

    auto_run = (await rpc("run.claim", {"workerId": "w2"}))["run"]
    await rpc("run.requeue", {"runId": auto_run["id"]})
    await rpc("run.cancel", {"runId": auto_run["id"], "force": True})
    assert (await rpc("run.claim", {"workerId": "w2"})) == {"run": None}
    await rpc("run.list", {})
    started = await rpc("run.start", {"sessionId": "spare", "workerId": "w3"})
    await rpc(
        "run.complete",
        {"runId": started["id"], "status": "failed", "error": "no", "workerId": "w3"},
    )
    await rpc("run.enqueue", {"sessionId": "spare"})

    created = await tool("src", "ccweb_create_conversation", {"title": "Bare"})
    await tool(
        "src",
        "ccweb_create_conversation",
        {"title": "Asked", "content": "look", "requestReply": True},
    )
    await tool(
        "src",
        "ccweb_create_conversation",
        {"title": "Told", "content": "fyi", "requestReply": False},
    )
    asked = await tool(
        "src",
        "ccweb_request_reply",
        {"targetConversationId": created["conversationId"], "content": "check"},
    )
    await rpc("run.cancel", {"runId": asked["runId"]})
    await rpc("reply.fail", {"requestId": asked["requestId"], "reason": "gave up"})
    await rpc("reply.retry", {"requestId": asked["requestId"]})
    await rpc("reply.expire", {"olderThanSeconds": 0})
    await tool(
        "src",
        "ccweb_send_message",
        {"targetConversationId": "dst", "content": "fyi", "replyMode": "one_way"},
    )

    card = await tool(
        "src", "ccweb_prompt_user", {"title": "Setup", "questions": [{"id": "db", "question": "?"}]}
    )
    await rpc("prompt.respond", {"promptId": card["promptId"], "answers": {"db": "PostgreSQL"}})

    minted = await rpc("credential.mint", {"sessionId": "src", "label": "agent"})
    await rpc("credential.revoke", {"credentialId": minted["credential"]["id"]})
    await rpc("credential.list", {"includeInactive": True})
    await rpc("events.list", {})
    await rpc("events.list", {"conversation": "src", "types": ["message.appended"]})

    await rpc("operator.conversations", {"includeArchived": True})
    await rpc("operator.conversation", {"id": "src"})
    await rpc("operator.doctor", {})
    await rpc("session.archive", {"id": "spare"})
    await rpc("session.update", {"id": "dst", "agentSessionId": None})

    await rpc("tools.list", {})
    await rpc("tools.dynamic", {})
    await rpc("tools.composerItems", {})
    for method in TOOL_METHODS:
        await rpc(
            method, {"tool": "ccweb_list_conversations", "args": {}, "sourceSessionId": "src"}
        )

    assert calls.methods == set(METHODS)
    assert calls.tools == {tool.name for tool in TOOLS}


def a_run() -> Run:
    at = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    return Run("run-1", "conv-a", "user_turn", "queued", None, None, 0, None, None, 0, at, None,
               None, None, None)  # fmt: skip


def test_a_key_the_model_does_not_list_is_refused() -> None:
    """What catches an answer that grows an unlisted key: it no longer validates against the
    published schema."""
    schema = METHODS["run.start"].output_schema
    answer = dumped(RunOut.model_validate(a_run()))
    check(schema, answer)
    with pytest.raises(jsonschema.ValidationError, match="leaseToken"):
        check(schema, {**answer, "leaseToken": "secret"})


@pytest.mark.parametrize(
    ("change", "wrong"),
    [
        (lambda answer: answer.pop("status"), "status"),
        (lambda answer: answer.update(attempts="0"), "'0'"),
        (lambda answer: answer.update(attempts=0.5), "0.5"),
        (lambda answer: answer.update(workerId=7), "7"),
        (lambda answer: answer.update(createdAt=None), "None"),
    ],
)
def test_a_missing_key_or_another_json_type_is_refused(change: Any, wrong: str) -> None:
    answer: dict[str, Any] = dumped(RunOut.model_validate(a_run()))
    change(answer)
    with pytest.raises(jsonschema.ValidationError, match=wrong):
        check(METHODS["run.start"].output_schema, answer)


#: The one open object: a tool failure's ``error``, which carries what its error adds.
ERROR_DETAIL = "code, message"


def open_objects(schema: Any) -> list[str]:
    """The objects in a JSON schema that allow properties they do not list."""
    found = []
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and schema.get("additionalProperties") is not False
            and ", ".join(schema["properties"]) != ERROR_DETAIL
        ):
            found.append(", ".join(schema["properties"]))
        found += [title for value in schema.values() for title in open_objects(value)]
    elif isinstance(schema, list):
        found += [title for value in schema for title in open_objects(value)]
    return found


@pytest.mark.parametrize(
    "operation", [*METHODS.values(), *TOOLS], ids=lambda operation: operation.name
)
def test_every_published_answer_schema_is_closed_and_valid(operation: Any) -> None:
    schema = operation.output_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert open_objects(schema) == []


def test_every_tool_publishes_its_output_schema_beside_its_input_schema() -> None:
    from ccweb_store.protocol.registry import public_tools

    for listed in public_tools():
        tool = get_tool(listed["name"])
        assert listed["outputSchema"] == tool.output_schema
        assert listed["outputSchema"]["type"] == "object"


async def test_a_tool_failure_is_what_the_tool_publishes_too(store: Store) -> None:
    """MCP holds every result's ``structuredContent`` to the tool's ``outputSchema``, a
    failure's (``isError: true``) too, as the TypeScript SDK's client checks it."""
    await host_calls.call(store, "session.create", {"id": "alone"})
    failures = {
        "ccweb_send_message": {
            "targetConversationId": "alone",
            "content": "hi",
            "replyMode": "one_way",
        },
        "ccweb_create_conversation": {"title": 7},
        "ccweb_list_conversations": {"limit": "many"},
        "ccweb_get_pending_reply": {"requestId": "rr-none"},
        "ccweb_list_user_inputs": {"conversationId": "nobody"},
        "ccweb_prompt_user": {"questions": []},
        "ccweb_request_reply": {"targetConversationId": "nobody", "content": "hi"},
    }
    assert set(failures) == {tool.name for tool in TOOLS}
    for name, args in failures.items():
        result = await failed(store, name, args)
        check(get_tool(name).output_schema, result)
    too_long = {"targetConversationId": "x" * 300, "content": "hi", "replyMode": "one_way"}
    result = await failed(store, "ccweb_send_message", too_long)
    assert result["error"]["code"] == "invalid_conversation_id"
    check(get_tool("ccweb_send_message").output_schema, result)


async def failed(store: Store, name: str, args: dict[str, Any]) -> Any:
    """The ``structuredContent`` of a ``tools/call`` that fails, as the wire carries it."""
    result = orjson.loads(
        orjson.dumps(
            await mcp.answer_tools_call(store, Source("alone"), {"name": name, "arguments": args})
        )
    )
    assert result["isError"] is True, (name, result)
    return result["structuredContent"]
