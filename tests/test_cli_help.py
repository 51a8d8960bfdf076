"""The command's help text names each option's environment variable and default."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ccweb_store.cli import app


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
