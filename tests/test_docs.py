"""The docs stay true to the code: the Python client example in docs/tools.md runs against a
real server, every module is in the module map, every migration is described, every relative
link resolves (and names the page it links to), and the README stays short."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx

from tests.servers import ROOT, server_env, serving

TOKEN = "operator-token-for-the-docs-tests"


def code_block(page: Path, language: str, after: str) -> str:
    """The first ```language block of ``page`` after the heading ``after``."""
    text = page.read_text()
    section = text[text.index(after) :]
    match = re.search(rf"```{language}\n(.*?)```", section, re.DOTALL)
    assert match is not None, f"no {language} block after {after!r} in {page}"
    return match.group(1)


def test_the_python_client_example_in_tools_md_runs(tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(code_block(ROOT / "docs" / "tools.md", "python", "### From Python"))
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'ccweb.db'}"
    with serving(database_url, CCWEB_TOKEN=TOKEN) as server:

        def rpc(method: str, params: dict[str, object]) -> dict[str, object]:
            answer = httpx.post(
                f"{server.url}/rpc",
                json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                headers={"Authorization": f"Bearer {TOKEN}"},
            ).json()
            result: dict[str, object] = answer["result"]
            return result

        rpc("session.create", {"id": "planner", "title": "Planner"})
        rpc("session.create", {"id": "reviewer", "title": "Reviewer"})
        token = rpc("credential.mint", {"sessionId": "planner"})["token"]
        env = server_env(
            CCWEB_MCP_URL=f"{server.url}/mcp?credential={token}", CCWEB_TARGET="reviewer"
        )
        ran = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60
        )
        messages = rpc("message.list", {"sessionId": "reviewer"})["messages"]
    assert ran.returncode == 0, ran.stderr
    assert "tools: ccweb_create_conversation" in ran.stdout
    assert "sent: " in ran.stdout
    assert isinstance(messages, list)
    assert [m["content"] for m in messages] == ["Please review the schema change."]


def _table_rows(page: Path) -> dict[str, str]:
    """``| `key` | text |`` rows of a Markdown page, by key."""
    rows = {}
    for line in page.read_text().splitlines():
        match = re.match(r"\| `([^`]+)` \| (.*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_module_is_in_the_module_map() -> None:
    rows = _table_rows(ROOT / "docs" / "development.md")
    package = ROOT / "ccweb_store"
    missing = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts[0] == "migrations" or path.name == "__init__.py":
            continue
        folder = "/".join(relative.parts[:-1]) + "/" if len(relative.parts) > 1 else "ccweb_store/"
        if f"`{path.stem}`" not in rows.get(folder, ""):
            missing.append(f"{folder}{path.stem}")
    assert missing == [], "add these to docs/development.md's module map"


def test_every_migration_is_described() -> None:
    text = (ROOT / "docs" / "database.md").read_text()
    section = text[text.index("## Migrations") :]
    versions = ROOT / "ccweb_store" / "migrations" / "versions"
    revisions = sorted(path.name.split("_")[0] for path in versions.glob("[0-9]*.py"))
    assert len(revisions) >= 9
    missing = [revision for revision in revisions if f"`{revision}`" not in section]
    assert missing == [], "describe these in docs/database.md#migrations"


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings."""
    anchors = set()
    for line in page.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slug = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            anchors.add(slug)
    return anchors


def test_every_relative_link_in_the_docs_resolves() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for label, target in re.findall(r"\[([^\]]*)\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            named = re.fullmatch(r"(?:docs/)?([\w-]+\.md)", label.strip("`"))
            if named and Path(path).name != named.group(1):
                broken.append(f"{page.name}: [{label}]({target}) (names another page)")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == [], "fix these links"


def test_the_readme_stays_under_12000_characters() -> None:
    size = len((ROOT / "README.md").read_text())
    assert size < 12_000, f"README.md has {size} characters: move detail to docs/"
