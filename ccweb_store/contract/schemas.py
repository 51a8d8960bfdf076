"""The published JSON schemas of the contract's models, as clients read them best: one object
with its nested schemas inlined (no ``$defs``), and no generated titles.

An input's schema (a tool's ``inputSchema``, a host method's params) shows an optional
argument as its plain type (no ``anyOf … null``, no ``default: null``; a required one that
may be null keeps its null) and lists as required
the arguments a model keeps a compatibility default for (``published_required``). An output's
schema (a tool's ``outputSchema``, a host method's result) keeps null where the answer may
hold it, and does not list as required a key the answer leaves out when it holds nothing
(``base.omitted``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

from ccweb_store.contract.base import ABSENT


class _Published(GenerateJsonSchema):
    """Pydantic's generator, with the stand-in of ``omitted(ABSENT)`` shown as no default."""

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        if schema.get("default") is ABSENT:
            return self.generate_inner(schema["schema"])
        return super().default_schema(schema)


def input_schema(model: type[BaseModel], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The schema of a call's input model; ``required`` adds arguments that have a default."""
    schema = model.model_json_schema(by_alias=True, schema_generator=_Published)
    plain = _plain(schema, drop_null=True)
    for name in required:
        plain["properties"][name].pop("default", None)
    listed = set(plain.get("required", ())) | set(required)
    if listed:
        plain["required"] = [name for name in plain["properties"] if name in listed]
    return plain


def output_schema(answer: Any) -> dict[str, Any]:
    """The schema of an answer's type (a model, a list of them, or a union). A union of
    objects is one object schema of ``anyOf`` (what an MCP ``outputSchema`` must be)."""
    schema = TypeAdapter(answer).json_schema(
        by_alias=True, mode="serialization", schema_generator=_Published
    )
    plain = _plain(schema, drop_null=False)
    _drop_defaults(plain)
    if "anyOf" in plain and all(part.get("type") == "object" for part in plain["anyOf"]):
        plain = {"type": "object", **plain}
    return plain


def _plain(schema: dict[str, Any], *, drop_null: bool) -> dict[str, Any]:
    """A generated schema with its ``$defs`` inlined and no models' descriptions (a model's
    docstring is for this code's readers; a field's description stays)."""
    definitions = schema.pop("$defs", {})
    for definition in definitions.values():
        definition.pop("description", None)
    schema.pop("description", None)
    plain = _inlined(schema, definitions, drop_null=drop_null)
    assert isinstance(plain, dict)
    return plain


def _drop_defaults(node: Any) -> None:
    """An answer has no defaults to show: every key it lists holds what the answer says."""
    if isinstance(node, list):
        for item in node:
            _drop_defaults(item)
    elif isinstance(node, dict):
        node.pop("default", None)
        for key, item in node.items():
            if key == "properties":
                for value in item.values():
                    _drop_defaults(value)
            else:
                _drop_defaults(item)


def _inlined(
    node: Any, definitions: dict[str, Any], *, drop_null: bool, required: bool = False
) -> Any:
    """``node`` with its ``$ref``s replaced by what they name and its titles left out; with
    ``drop_null``, an optional value's ``anyOf [X, null]`` as X (a ``required`` one, which
    null clears, keeps its null)."""
    if isinstance(node, list):
        return [_inlined(item, definitions, drop_null=drop_null) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = definitions[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    options = node.get("anyOf")
    nullable = isinstance(options, list) and len(options) == 2 and {"type": "null"} in options
    if drop_null and nullable and not required:
        (kept,) = [option for option in options if option != {"type": "null"}]
        node = {**{k: v for k, v in node.items() if k != "anyOf"}, **kept}
        if node.get("default", 0) is None:
            del node["default"]
        if "$ref" in node:  # the kept option names a nested model
            return _inlined(node, definitions, drop_null=drop_null)
    inlined: dict[str, Any] = {}
    for key, item in node.items():
        if key == "title" and isinstance(item, str):
            continue
        if key == "properties":
            # A required argument that may be null (a value that clears) keeps its null.
            listed = set(node.get("required", ()))
            inlined[key] = {
                name: _inlined(value, definitions, drop_null=drop_null, required=name in listed)
                for name, value in item.items()
            }
        else:
            inlined[key] = _inlined(item, definitions, drop_null=drop_null)
    return inlined
