"""What ``ccweb-store worker`` runs for a run: the command per conversation or agent, from
``--command``/``--timeout`` and a TOML file, rendered with shell-quoted values, and the
environment it runs in (the run's context, never the operator's secrets)."""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccweb_store.domain.durations import parse_duration

#: What the command may say: each value goes in shell-quoted, so a placeholder is never quoted
#: again in the template (``claude -p {prompt}``, not ``claude -p "{prompt}"``).
PLACEHOLDERS = ("prompt", "conversation_id", "run_id", "hop_count")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
#: Left out of the command's environment: they would let the agent act as anyone.
WITHHELD_ENV = ("CCWEB_TOKEN", "CCWEB_CREDENTIAL_SECRET", "CCWEB_DATABASE_URL")
DEFAULT_TIMEOUT_SECONDS = 3600.0


class ConfigError(ValueError):
    """The worker's command or configuration file is unusable (the message says why)."""


@dataclass(frozen=True)
class CommandSpec:
    """One command template and how long it may run."""

    command: str
    timeout: float = DEFAULT_TIMEOUT_SECONDS


@dataclass(frozen=True)
class WorkerConfig:
    """The default command and the overrides per agent (``sessions.agent``) and per
    conversation; a conversation's override wins over its agent's, which wins over the
    default."""

    default: CommandSpec | None
    agents: Mapping[str, CommandSpec] = field(default_factory=dict)
    conversations: Mapping[str, CommandSpec] = field(default_factory=dict)

    @property
    def longest_timeout(self) -> float:
        """The longest timeout of any command: a run's credential outlives its command."""
        specs = [self.default, *self.agents.values(), *self.conversations.values()]
        return max((spec.timeout for spec in specs if spec is not None), default=0.0)

    def command_for(self, conversation_id: str, agent: str | None) -> CommandSpec:
        spec = self.conversations.get(conversation_id)
        if spec is None and agent is not None:
            spec = self.agents.get(agent)
        spec = spec or self.default
        if spec is None:
            raise ConfigError(
                f"no command for conversation {conversation_id!r} (agent {agent!r}): give "
                "--command, or a top-level command in the config file"
            )
        return spec


def _seconds(value: object, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    if isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if seconds > 0:
            return float(seconds)
    raise ConfigError(f"{where}: expected a positive number of seconds or a duration like 30m")


def _spec(table: object, where: str, default_timeout: float) -> CommandSpec:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table with a command")
    unknown = set(table) - {"command", "timeout"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    command = table.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}.command must be a non-empty string")
    timeout = table.get("timeout")
    return CommandSpec(
        command, default_timeout if timeout is None else _seconds(timeout, f"{where}.timeout")
    )


def load_config(
    path: Path | None, *, command: str | None = None, timeout: float | None = None
) -> WorkerConfig:
    """The worker's configuration: a TOML file (``command``, ``timeout``, ``[agents.<name>]``,
    ``[conversations.<id>]``, each table with ``command`` and an optional ``timeout``), with
    ``--command`` and ``--timeout`` laid over its top level."""
    document: dict[str, Any] = {}
    if path is not None:
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    unknown = set(document) - {"command", "timeout", "agents", "conversations"}
    if unknown:
        raise ConfigError(
            f"{path}: unknown key(s) {', '.join(sorted(unknown))}; "
            "expected command, timeout, [agents.<name>], [conversations.<id>]"
        )
    base_timeout = timeout
    if base_timeout is None:
        raw = document.get("timeout")
        base_timeout = DEFAULT_TIMEOUT_SECONDS if raw is None else _seconds(raw, "timeout")
    default_command = command if command is not None else document.get("command")
    default = None
    if default_command is not None:
        default = _spec({"command": default_command}, "command", base_timeout)
    overrides: dict[str, dict[str, CommandSpec]] = {}
    for section in ("agents", "conversations"):
        tables = document.get(section, {})
        if not isinstance(tables, dict):
            raise ConfigError(f"[{section}] must be a table of tables")
        overrides[section] = {
            name: _spec(table, f"{section}.{name}", base_timeout) for name, table in tables.items()
        }
    if default is None and not overrides["agents"] and not overrides["conversations"]:
        raise ConfigError(
            "no command to run: give --command 'claude -p {prompt}' or --config worker.toml"
        )
    for spec in [default, *overrides["agents"].values(), *overrides["conversations"].values()]:
        if spec is not None:
            check_template(spec.command)
    return WorkerConfig(default, overrides["agents"], overrides["conversations"])


def check_template(template: str) -> None:
    """Refuse a template that quotes a placeholder itself (the value is quoted already)."""
    for quote in ("'", '"'):
        for name in PLACEHOLDERS:
            if f"{quote}{{{name}}}{quote}" in template:
                raise ConfigError(
                    f"{template!r}: write {{{name}}} without quotes around it; "
                    "the worker shell-quotes every value it puts in"
                )


def render_command(
    template: str, *, prompt: str, conversation_id: str, run_id: str, hop_count: int
) -> tuple[str, bool]:
    """The shell command for a run, and whether the prompt goes on stdin (when the template
    has no ``{prompt}``)."""
    values = {
        "prompt": prompt,
        "conversation_id": conversation_id,
        "run_id": run_id,
        "hop_count": str(hop_count),
    }
    command = _PLACEHOLDER.sub(lambda match: shlex.quote(values[match.group(1)]), template)
    return command, "{prompt}" not in template


def child_environment(
    base: Mapping[str, str], *, mcp_url: str, token: str, run: Mapping[str, Any]
) -> dict[str, str]:
    """The command's environment: ours without ``WITHHELD_ENV``, plus the run's context."""
    env = {key: value for key, value in base.items() if key not in WITHHELD_ENV}
    env.update(
        CCWEB_MCP_URL=mcp_url,
        CCWEB_CREDENTIAL=token,
        CCWEB_CONVERSATION_ID=run["sessionId"],
        CCWEB_RUN_ID=run["id"],
        CCWEB_RUN_KIND=run["kind"],
        CCWEB_HOP_COUNT=str(run["hopCount"]),
    )
    return env
