"""What one call is: its name, its input and output models, the service that answers it and
who may call it (``Operation``), and how a row of the registry is written (``tool``,
``method``). Which calls there are is ``registry``'s.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ccweb_store.contract import tool_answers as answers
from ccweb_store.contract.base import Input
from ccweb_store.contract.schemas import input_schema, output_schema
from ccweb_store.domain.arguments import reject_nul, require_mapping
from ccweb_store.protocol.argument_errors import parsed


def dumped(value: BaseModel) -> Any:
    """An output model as the wire's JSON values, outside a call (the console, the CLI)."""
    return value.model_dump(by_alias=True)


class Audience(StrEnum):
    """Who may call an operation, and where it is listed."""

    #: An MCP tool an agent calls: listed by ``tools/list`` and the host's ``tools.*``.
    AGENT = "agent"
    #: An MCP tool kept for old threads: callable everywhere, listed nowhere.
    HIDDEN = "hidden"
    #: A host API method on ``/rpc``.
    HOST = "host"


class UnknownTool(LookupError):
    """No tool of that name exists (the protocols answer JSON-RPC -32602)."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown tool {name!r}")
        self.name = name


@dataclass(frozen=True)
class Operation:
    """One call: its name, its two models, the service that answers it, who may call it,
    and for a tool its title, description and annotations."""

    name: str
    input: type[Input]
    output: Any
    handler: Callable[..., Awaitable[Any]]
    audience: Audience = Audience.HOST
    title: str = ""
    description: str = ""
    read_only: bool = False
    #: A tool of the host's dynamic-tool whitelist (``tools.dynamic``).
    communication: bool = False
    # Made on first use, so that a command that runs one call builds only its own.

    @functools.cached_property
    def input_schema(self) -> dict[str, Any]:
        """The published schema of the input (a tool's ``inputSchema``)."""
        return input_schema(self.input, self.input.published_required)

    @functools.cached_property
    def output_schema(self) -> dict[str, Any]:
        """The published schema of the output; a tool's (its ``outputSchema``) admits its
        failure, ``answers.ToolError``, too."""
        if self.is_tool:
            return output_schema(self.output | answers.ToolError)
        return output_schema(self.output)

    @functools.cached_property
    def _reads(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.input)

    @functools.cached_property
    def _writes(self) -> TypeAdapter[Any]:
        return TypeAdapter(self.output)

    @property
    def is_tool(self) -> bool:
        return self.audience is not Audience.HOST

    @property
    def public(self) -> bool:
        """A tool the listings show."""
        return self.audience is Audience.AGENT

    def parse(self, params: object, *, checked: bool = False) -> Any:
        """``params`` as the input model, or ``invalid_arguments`` naming the first problem
        (a tool's led by its name); a text holding U+0000 is refused too, after the model's
        checks for a tool's arguments, before them for a method's params. ``checked``: the
        caller refused NUL characters already (``tools.call``'s params hold the arguments)."""
        if not self.is_tool:
            if not checked:
                reject_nul(params, f"{self.name}: a parameter")
            return parsed(self._reads, require_mapping(params, "params"))
        given = require_mapping(params, f"{self.name}: arguments")
        call = parsed(self._reads, given, self.name)
        if not checked:
            reject_nul(given, f"{self.name}: an argument")
        return call

    def dump(self, result: Any) -> Any:
        """``result`` as the wire's JSON values (camelCase keys, times as text)."""
        return self._writes.dump_python(result, by_alias=True)

    def definition(self) -> answers.ToolDefinition:
        """The tool as ``tools/list`` shows it."""
        annotations = answers.ToolAnnotations(
            title=self.title,
            read_only_hint=self.read_only,
            destructive_hint=False,
            open_world_hint=False,
        )
        return answers.ToolDefinition(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.input_schema,
            output_schema=self.output_schema,
            annotations=annotations,
        )


def tool(name: str, title: str, description: str, model: type[Input], output: Any,
         handler: Callable[..., Awaitable[Any]], **options: Any) -> Operation:  # fmt: skip
    """A tool's row (``Audience.AGENT`` unless ``audience`` says)."""
    options.setdefault("audience", Audience.AGENT)
    return Operation(name, model, output, handler, title=title, description=description,
                     **options)  # fmt: skip


def method(name: str, model: type[Input], output: Any,
           handler: Callable[..., Awaitable[Any]]) -> Operation:  # fmt: skip
    """A host method's row."""
    return Operation(name, model, output, handler)
