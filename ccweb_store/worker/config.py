"""What ``ccweb-store worker`` runs for a run: the command per conversation or agent, from
``--command``/``--timeout`` and a TOML file, rendered with shell-quoted values, or the built-in
agent of the conversation (``worker.agents``); and the environment it runs in (the run's
context, never the operator's secrets)."""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccweb_store.domain.durations import parse_duration
from ccweb_store.worker.agents import AGENTS, CREDENTIAL_VARIABLE, BuiltinAgent, shown

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
class BuiltinSpec:
    """A built-in agent's command (``worker.agents``), the user's extra arguments for it (an
    ``args`` table without ``command``), and how long it may run."""

    agent: BuiltinAgent
    args: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT_SECONDS


@dataclass(frozen=True)
class ExtraArgs:
    """An ``args`` table: the built-in agent of the run's conversation, with these arguments."""

    args: tuple[str, ...]
    timeout: float = DEFAULT_TIMEOUT_SECONDS


#: What a table of the file says to run: a command of the user's, or extra arguments for the
#: built-in agent of the run's conversation.
Entry = CommandSpec | ExtraArgs


@dataclass(frozen=True)
class WorkerConfig:
    """What runs a conversation's runs: its own entry (``[conversations.<id>]``), else its
    agent's (``[agents.<name>]``), else the default command (``--command``, the file's
    ``command``), else the built-in agent of its ``agent`` (``claude``, ``codex``)."""

    default: CommandSpec | None = None
    agents: Mapping[str, Entry] = field(default_factory=dict)
    conversations: Mapping[str, Entry] = field(default_factory=dict)
    #: How long a built-in agent's run may take when no entry says.
    timeout: float = DEFAULT_TIMEOUT_SECONDS

    @property
    def longest_timeout(self) -> float:
        """The longest timeout of any command: a run's credential outlives its command."""
        specs = [self.default, *self.agents.values(), *self.conversations.values()]
        return max([self.timeout, *(spec.timeout for spec in specs if spec is not None)])

    def command_for(self, conversation_id: str, agent: str | None) -> CommandSpec | BuiltinSpec:
        entry: Entry | None = self.conversations.get(conversation_id)
        if entry is None and agent is not None:
            entry = self.agents.get(agent)
        if entry is None:
            entry = self.default
        if isinstance(entry, CommandSpec):
            return entry
        builtin = AGENTS.get(agent or "")
        if builtin is None:
            where = "its [conversations.<id>] table" if entry is not None else "a command"
            raise ConfigError(
                f"no command for conversation {conversation_id!r} (agent {agent!r}): the worker "
                f"runs the agents {' and '.join(AGENTS)} itself; for {where}, give --command, "
                f"or [agents.{agent or '<name>'}] or [conversations.{conversation_id}] with a "
                "command in the --config file"
            )
        if entry is None:
            return BuiltinSpec(builtin, (), self.timeout)
        return BuiltinSpec(builtin, entry.args, entry.timeout)


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


def _entry(table: object, where: str, default_timeout: float) -> Entry:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table with a command (or args)")
    unknown = set(table) - {"command", "args", "timeout"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    command, args = table.get("command"), table.get("args")
    timeout = table.get("timeout")
    seconds = default_timeout if timeout is None else _seconds(timeout, f"{where}.timeout")
    if command is not None and args is not None:
        raise ConfigError(
            f"{where}: give command (a command of yours) or args (extra arguments for the "
            "built-in claude or codex command), not both"
        )
    if args is not None:
        if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
            raise ConfigError(f"{where}.args must be a list of strings")
        return ExtraArgs(tuple(args), seconds)
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}.command must be a non-empty string")
    return CommandSpec(command, seconds)


def load_config(
    path: Path | None, *, command: str | None = None, timeout: float | None = None
) -> WorkerConfig:
    """The worker's configuration: a TOML file (``command``, ``timeout``, ``[agents.<name>]``,
    ``[conversations.<id>]``, each table with ``command`` or ``args`` and an optional
    ``timeout``), with ``--command`` and ``--timeout`` laid over its top level. No file and no
    command: the built-in agents only."""
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
        entry = _entry({"command": default_command}, "command", base_timeout)
        assert isinstance(entry, CommandSpec)
        default = entry
    overrides: dict[str, dict[str, Entry]] = {}
    for section in ("agents", "conversations"):
        tables = document.get(section, {})
        if not isinstance(tables, dict):
            raise ConfigError(f"[{section}] must be a table of tables")
        overrides[section] = {
            name: _entry(table, f"{section}.{name}", base_timeout) for name, table in tables.items()
        }
    for name, entry in overrides["agents"].items():
        if isinstance(entry, ExtraArgs) and name not in AGENTS:
            raise ConfigError(
                f"agents.{name}: args are extra arguments for a built-in agent "
                f"({', '.join(AGENTS)}); give {name} a command instead"
            )
    for spec in [default, *overrides["agents"].values(), *overrides["conversations"].values()]:
        if isinstance(spec, CommandSpec):
            check_template(spec.command)
    return WorkerConfig(default, overrides["agents"], overrides["conversations"], base_timeout)


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
    base: Mapping[str, str],
    *,
    endpoint: str,
    token: str,
    run: Mapping[str, Any],
    agent_session_id: str | None = None,
) -> dict[str, str]:
    """The command's environment: ours without ``WITHHELD_ENV``, plus the run's context:
    the MCP endpoint and the credential for it (and both as one URL for a client that cannot
    send a header), and the agent session the conversation resumes, when it has one."""
    env = {key: value for key, value in base.items() if key not in WITHHELD_ENV}
    env.pop("CCWEB_AGENT_SESSION_ID", None)
    if agent_session_id:
        env["CCWEB_AGENT_SESSION_ID"] = agent_session_id
    env.update(
        CCWEB_MCP_ENDPOINT=endpoint,
        CCWEB_MCP_URL=f"{endpoint}?credential={token}",
        CCWEB_CREDENTIAL=token,
        CCWEB_CONVERSATION_ID=run["sessionId"],
        CCWEB_RUN_ID=run["id"],
        CCWEB_RUN_KIND=run["kind"],
        CCWEB_HOP_COUNT=str(run["hopCount"]),
    )
    return env


def describe(config: WorkerConfig, endpoint: str) -> list[str]:
    """What each agent's runs get, a line each (``worker --show-commands``): the entries of the
    configuration, then the built-in agents (the exact command line, its prompt on stdin; a
    conversation with an agent session resumes it), then what becomes of any other agent."""
    lines = [
        f"[{section}.{name}]: {_entry_text(entry)}"
        for section, entries in (("conversations", config.conversations), ("agents", config.agents))
        for name, entry in entries.items()
    ]
    for agent in AGENTS.values():
        entry = config.agents.get(agent.name)
        if isinstance(entry, CommandSpec):
            continue
        if entry is None and config.default is not None:
            continue
        program = agent.find()
        where = program or f"{agent.program} (not on PATH: {agent.install_hint()})"
        args = entry.args if isinstance(entry, ExtraArgs) else ()
        argv = agent.command(program or agent.program, endpoint=endpoint, resume=None, args=args)
        resumed = agent.command(
            program or agent.program, endpoint=endpoint, resume="AGENT_SESSION_ID", args=args
        )
        lines += [
            f"{agent.name}: {agent.title}, built in, at {where}; the prompt on stdin, "
            f"{CREDENTIAL_VARIABLE} in its environment",
            f"  new session: {shown(argv)}",
            f"  resuming:    {shown(resumed)}",
        ]
    if config.default is not None:
        lines.append(f"any other agent: {config.default.command}")
    else:
        lines.append(
            "any other agent: none (its runs fail; give --command, or [agents.<name>] with a "
            "command in the --config file)"
        )
    return lines


def _entry_text(entry: Entry) -> str:
    if isinstance(entry, CommandSpec):
        return entry.command
    return f"the built-in agent of the conversation, with the extra arguments {shown(entry.args)}"
