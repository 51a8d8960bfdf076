"""The command's help text names each option's environment variable and default."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from ccweb_store import __version__
from ccweb_store.cli import app
from tests.cli_support import run_cli
from tests.servers import server_env


@pytest.mark.parametrize(
    ("command", "notes"),
    [
        (
            ["serve"],
            [
                "[env: CCWEB_HOST; default: 127.0.0.1]",
                "[env: CCWEB_PORT; default: 8787]",
                "[env: CCWEB_TOKEN]",
                "[env: CCWEB_DATABASE_URL; default: ccweb.db in CCWEB_DATA_DIR]",
                "[env: CCWEB_LOG_FORMAT]",
                "[env: CCWEB_ACCESS_LOG]",
            ],
        ),
        (["mcp-stdio"], ["[env: CCWEB_TOKEN]"]),
    ],
)
def test_help_shows_the_environment_variable_of_each_option(
    command: list[str], notes: list[str]
) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    for note in notes:
        assert note in text, f"{note!r} missing from the help of {' '.join(command)}"


def _commands(command: Any, path: list[str]) -> Iterator[list[str]]:
    """The path of every command that runs something (not a group), under ``command``."""
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        yield path
        return
    for name, sub in subcommands.items():
        yield from _commands(sub, [*path, name])


def test_every_command_shows_an_example_of_itself_in_its_help() -> None:
    commands = list(_commands(typer.main.get_command(app), []))
    assert len(commands) > 20

    for command in commands:
        result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        assert f"Example: ccweb-store {' '.join(command)}" in result.output, command


def test_version_prints_the_package_version() -> None:
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"ccweb-store {__version__}"


def test_help_flows_as_paragraphs_and_shows_no_type_placeholder_on_flags() -> None:
    """A docstring's hard line breaks are not kept (the terminal wraps the paragraph), and a
    flag shows no ``<bool>`` beside it, on every command."""
    for command in [[], *_commands(typer.main.get_command(app), [])]:
        result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        assert "<bool>" not in result.output, command
    doctor = CliRunner().invoke(app, ["doctor", "--help"], env={"COLUMNS": "400"})
    assert "With --server, the checks run in that server, on its settings and database." in (
        doctor.output
    )
    serve = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "400"})
    assert re.search(r"--access-log\s+--no-access-log", serve.output)


def test_help_lists_the_commands_in_four_groups_in_a_clear_order() -> None:
    result = run_cli("--help", env={**server_env(), "COLUMNS": "200"})

    assert result.returncode == 0, result.stderr
    groups: dict[str, list[str]] = {}
    group = ""
    for line in result.stdout.splitlines():
        if heading := re.match(r"╭─ (.+?) ─", line):
            group = heading.group(1)
            groups[group] = []
        elif command := re.match(r"│ ([a-z][a-z-]+)\s{2,}", line):
            groups[group].append(command.group(1))
    assert list(groups) == [
        "Options",
        "Serve and set up",
        "Conversations and replies",
        "Runs and workers",
        "Data tools",
    ]
    assert groups["Serve and set up"] == [
        "serve",
        "migrate",
        "doctor",
        "conversation-url",
        "schema",
        "credentials",
    ]
    assert groups["Conversations and replies"] == ["messages", "conversations", "replies"]
    assert groups["Runs and workers"] == ["worker", "mcp-stdio", "runs"]
    assert set(groups["Data tools"]) == {
        "import-json",
        "export-json",
        "copy",
        "backup",
        "restore",
        "repair-json",
    }
