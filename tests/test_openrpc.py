"""The host API's OpenRPC document: served by ``rpc.discover`` and printed by ``ccweb-store
schema --openrpc``, read from the one registry, its schemas valid JSON Schema, and the method
table of docs/host-api.md held to it (every method, every param, which are required)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema

from ccweb_store.protocol import openrpc
from ccweb_store.protocol.registry import METHODS
from ccweb_store.store.uow import Store
from tests.cli_support import run_cli
from tests.http_client import app_client, rpc_result

ROOT = Path(__file__).resolve().parents[1]


async def test_rpc_discover_serves_the_document_of_every_method(store: Store) -> None:
    async with app_client(store) as client:
        served = await rpc_result(client, openrpc.DISCOVER)
    assert served == openrpc.document()
    assert served["openrpc"] == "1.3.2"
    names = [method["name"] for method in served["methods"]]
    assert names == [*METHODS, openrpc.DISCOVER]
    for method in served["methods"]:
        jsonschema.Draft202012Validator.check_schema(method["result"]["schema"])
        for param in method["params"]:
            assert param.keys() == {"name", "required", "schema"}
            jsonschema.Draft202012Validator.check_schema(param["schema"])
        assert method["paramStructure"] == "by-name" and method["summary"]


def test_the_cli_prints_the_same_document_and_the_tools_with_both_schemas() -> None:
    printed = run_cli("schema", "--openrpc")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == json.loads(json.dumps(openrpc.document()))
    tools = run_cli("schema", "--mcp")
    assert tools.returncode == 0, tools.stderr
    listed = json.loads(tools.stdout)["tools"]
    assert all({"inputSchema", "outputSchema"} <= tool.keys() for tool in listed)
    neither = run_cli("schema")
    assert neither.returncode == 2 and "give one of --openrpc" in neither.stderr


def documented_methods() -> dict[str, str]:
    """docs/host-api.md's method table: each method's params column, by method."""
    text = (ROOT / "docs" / "host-api.md").read_text()
    rows: dict[str, str] = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([a-zA-Z]+\.[a-zA-Z.]+)`", cells[0]):
            rows[name] = cells[1]
    return rows


def documented_params(column: str) -> list[tuple[list[str], bool]]:
    """The params a column names: each as its alternatives (``tool``/``name``) and whether
    the column marks it optional (``?``)."""
    if column in ("—", ""):
        return []
    depth, current, parts = 0, "", []
    for char in column.replace("`", ""):
        depth += (char in "{(" and 1) or ((char in "})" and -1) or 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    found = []
    for part in parts:
        head = re.split(r"[ :=({]", part.strip(), maxsplit=1)[0]
        names = [name.rstrip("?") for name in head.split("/")]
        found.append((names, head.endswith("?") or "/" in head))
    return found


def test_the_docs_method_table_is_the_documents() -> None:
    documented = documented_methods()
    methods: dict[str, Any] = {method["name"]: method for method in openrpc.document()["methods"]}
    assert set(documented) == set(methods)
    for name, column in documented.items():
        published = {param["name"]: param["required"] for param in methods[name]["params"]}
        named = set()
        for alternatives, optional in documented_params(column):
            for alternative in alternatives:
                assert alternative in published, f"{name}: {alternative} is not a param"
                named.add(alternative)
                if len(alternatives) == 1:
                    assert published[alternative] == (not optional), f"{name}: {alternative}"
        assert set(published) - named <= OPTIONAL_UNDOCUMENTED.get(name, set()), name


#: Params the table leaves out on purpose: aliases a method reads for old hosts.
OPTIONAL_UNDOCUMENTED = {
    "tools.call": {"sourceConversationId"},
    "tools.callDynamic": {"sourceConversationId"},
}
