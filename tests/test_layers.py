"""The layers' imports point down (http → protocol → services → store → domain): the store
imports nothing above it, the domain nothing but itself, and no module of these layers takes
another module's private names. Only the store (and Alembic's migrations) imports SQLAlchemy
and runs statements."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import ccweb_store
from ccweb_store.domain.kinds import ReplyMode, ReplyStatus, Role, RunKind, RunStatus

PACKAGE = Path(ccweb_store.__file__).parent
ABOVE_THE_STORE = (
    "contract",
    "services",
    "protocol",
    "http",
    "importer",
    "mobility",
    "cli",
    "worker",
)
#: pydantic is no I/O library: the domain writes the calls' models with it (``tool_arguments``).
IO_LIBRARIES = ("sqlalchemy", "starlette", "asyncpg", "aiosqlite", "sqlite3")


def imports_of(layer: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(module, imported module, names taken from it)`` for every import in ``layer``."""
    return imports_in(sorted((PACKAGE / layer).rglob("*.py")))


def imports_in(paths: list[Path]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(module, imported module, names taken from it)`` for every import in ``paths``."""
    found = []
    for path in paths:
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((module, node.module, tuple(alias.name for alias in node.names)))
            elif isinstance(node, ast.Import):
                found.extend((module, alias.name, ()) for alias in node.names)
    return found


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "ccweb_store" and len(parts) > 1 else None


def test_the_store_imports_nothing_above_it() -> None:
    upward = [
        (module, imported)
        for module, imported, _ in imports_of("store")
        if layer_of(imported) in ABOVE_THE_STORE
    ]
    assert upward == []


def test_the_domain_imports_neither_the_store_nor_any_io_library() -> None:
    outward = [
        (module, imported)
        for module, imported, _ in imports_of("domain")
        if (layer_of(imported) not in (None, "domain")) or imported.split(".")[0] in IO_LIBRARIES
    ]
    assert outward == []


#: Each layer and those it may import (besides ``config``, the settings every layer reads).
#: ``metrics`` (the server's counters) is counted into from the store up; neither the domain
#: nor the worker, which run no server, touch it.
MAY_IMPORT = {
    "domain": {"domain"},
    "contract": {"contract", "domain"},
    "store": {"store", "domain", "metrics"},
    "services": {"services", "contract", "store", "domain", "metrics"},
    "protocol": {"protocol", "services", "contract", "store", "domain", "metrics"},
    "http": {"http", "protocol", "services", "contract", "store", "domain", "metrics"},
    "importer": {"importer", "services", "contract", "store", "domain", "metrics"},
    "mobility": {"mobility", "importer", "services", "contract", "store", "domain", "metrics"},
    "worker": {"worker", "domain"},
}


def test_every_layer_imports_only_the_layers_below_it() -> None:
    upward = [
        (module, imported)
        for layer, allowed in MAY_IMPORT.items()
        for module, imported, _ in imports_of(layer)
        if layer_of(imported) not in (None, "config", "__version__", *allowed)
        and imported != "ccweb_store"
    ]
    assert upward == []


def test_no_module_of_ours_imports_a_private_name_of_another() -> None:
    private = [
        (module, imported, name)
        for layer in (*MAY_IMPORT, "cli")
        for module, imported, names in imports_of(layer)
        if imported.startswith("ccweb_store")
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert private == []


def test_importing_the_domain_loads_no_database_library() -> None:
    modules = sorted(
        f"ccweb_store.domain.{path.stem}"
        for path in (PACKAGE / "domain").glob("*.py")
        if path.stem != "__init__"
    )
    code = (
        f"import sys, {', '.join(modules)}\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in "
        f"{IO_LIBRARIES!r} or n.startswith('ccweb_store.store')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"


#: The packages that build and run SQL: the store, and Alembic's migrations.
SQL_LAYERS = ("store", "migrations")


def outside_the_store() -> list[Path]:
    """Every module of the package but the store's and the migrations'."""
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] not in SQL_LAYERS
    ]


def test_only_the_store_imports_sqlalchemy() -> None:
    outside = [
        (module, imported)
        for module, imported, _ in imports_in(outside_the_store())
        if imported.split(".")[0] == "sqlalchemy"
    ]
    assert outside == []


def runs_a_statement(node: ast.Attribute) -> bool:
    """``….execute`` (a connection's, a unit of work's) or ``uow._execute``."""
    if node.attr == "execute":
        return True
    return node.attr == "_execute" and isinstance(node.value, ast.Name) and node.value.id == "uow"


def test_only_the_store_runs_statements_in_a_unit_of_work() -> None:
    """The layers above call repositories (``uow.runs…``) and the store's functions; a
    statement of their own has no way into a unit of work."""
    from ccweb_store.store.uow import UnitOfWork

    assert not hasattr(UnitOfWork, "execute")
    calls = [
        (str(path.relative_to(PACKAGE)), node.lineno)
        for path in outside_the_store()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and runs_a_statement(node)
    ]
    assert calls == []


def test_services_take_typed_calls_never_wire_params() -> None:
    """A call is parsed once, at the edge, into its input model (``contract/``): no service
    function takes the wire's ``params`` or ``args`` mapping."""
    wire = []
    for path in sorted((PACKAGE / "services").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for argument in node.args.args + node.args.kwonlyargs:
                annotation = ast.unparse(argument.annotation) if argument.annotation else ""
                untyped = annotation.startswith(("Mapping[str, Any]", "dict[str, Any]"))
                if argument.arg == "params" or (
                    argument.arg in ("args", "call", "query") and untyped
                ):
                    wire.append(f"{path.name}:{node.lineno} {node.name}({argument.arg})")
    assert wire == []


def test_services_return_python_never_wire_dicts() -> None:
    """Services hand out rows and dataclasses; the wire's camelCase is shaped at the edges
    (``protocol/shapes/``, which services cannot import: ``MAY_IMPORT``). So no coroutine
    of a service (every function that reads or writes the store is one) is annotated to
    return ``dict[str, Any]``, alone or inside another type."""
    untyped = []
    for path in sorted((PACKAGE / "services").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            returns = node.returns if isinstance(node, ast.AsyncFunctionDef) else None
            if returns is not None and "dict[str, Any]" in ast.unparse(returns):
                untyped.append(f"{path.name}:{node.lineno} {node.name}")
    assert untyped == []


#: The words the enums of ``domain.kinds`` stand for: code names them through the enums (or
#: the tuples of ``domain.ids``), never as bare literals.
ENUM_VALUES = frozenset(
    member.value for enum in (ReplyMode, Role, ReplyStatus, RunKind, RunStatus) for member in enum
)
#: Where such literals may stand: the domain (which defines them), the tables (their partial
#: index's ``WHERE``) and Alembic's migrations (which never change).
MAY_SPELL_ENUM_VALUES = ("domain/", "migrations/", "store/models.py")
#: Methods whose text arguments are names, not values: a dict's key (``params.get("tool")``),
#: a table alias (``RUNS.alias("running")``).
NAME_TAKING_METHODS = frozenset({"get", "pop", "setdefault", "alias"})
#: Words that are enum values but mean something else in a module: the metric label named
#: ``tool`` (the tool a call names, not a message role).
OTHER_MEANINGS = frozenset({("metrics.py", "tool")})


def bare_enum_values(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, value)`` of every enum value written as a literal where a value goes: compared,
    passed to a call, in a tuple, list or set, or a default or assigned value. Dict keys,
    subscripts and words inside longer text are not looked at."""

    def is_enum_value(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and node.value in ENUM_VALUES

    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += [n for n in (node.left, *node.comparators) if is_enum_value(n)]
        elif isinstance(node, ast.Call):
            names = isinstance(node.func, ast.Attribute) and node.func.attr in NAME_TAKING_METHODS
            arguments = [*node.args, *(keyword.value for keyword in node.keywords)]
            found += [n for n in arguments[1 if names else 0 :] if is_enum_value(n)]
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            found += [n for n in node.elts if is_enum_value(n)]
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            found += [node.value] if is_enum_value(node.value) else []
        elif isinstance(node, ast.arguments):
            found += [n for n in (*node.defaults, *node.kw_defaults) if is_enum_value(n)]
    return sorted({(n.lineno, str(n.value)) for n in found if isinstance(n, ast.Constant)})


def test_statuses_modes_roles_and_kinds_are_named_through_their_enums() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if module.startswith(MAY_SPELL_ENUM_VALUES):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [
            f"ccweb_store/{module}:{line}: {value!r}"
            for line, value in bare_enum_values(tree)
            if (module, value) not in OTHER_MEANINGS
        ]
    assert not offenders, "bare enum values (use domain.kinds / domain.ids):\n" + "\n".join(
        offenders
    )
