"""The operator console: server-rendered pages at ``/`` and under ``/console/`` (docs/console.md).

``pages`` holds the routes, ``session`` the login cookie, ``templates/`` the Jinja2 pages and
``static/`` the one script and style sheet they load.
"""

from __future__ import annotations

#: The console's paths: the overview and everything under the prefix.
HOME = "/"
PREFIX = "/console/"
LOGIN_PATH = "/console/login"
STATIC_PREFIX = "/console/static/"


def is_console_path(path: str) -> bool:
    return path == HOME or path.startswith(PREFIX)
