"""The package's layers, and that imports between them flow one way (docs/development.md, "Layers").

Every module of ``smq`` belongs to one layer; a module may import its own layer and those below it,
never one above, not even for types only (``if TYPE_CHECKING:``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "smq"

#: From the bottom up: each layer's name and its modules' prefixes (a module's layer is that of
#: its longest prefix here).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("smq._errors", "smq._version")),
    ("connection", ("smq.connection", "smq.embedded")),
    ("core", ("smq.core",)),
    ("operations", ("smq.operations",)),
    ("client", ("smq.client",)),
    ("surfaces", ("smq", "smq.aio", "smq.cli", "smq.server", "smq.worker", "smq.exporter", "smq.spark")),
)


def layer_of(module: str) -> int:
    best, rank = "", -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, rank = prefix, index
    assert rank >= 0, f"{module} is in no layer"
    return rank


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[int, str]]:
    """The smq modules ``path`` imports (with the line), relative imports resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == "smq" or target.startswith("smq."):
                # `from smq.core import _keys` imports the module smq.core._keys
                for alias in node.names:
                    child = f"{target}.{alias.name}"
                    as_module = (PACKAGE.parent / child.replace(".", "/")).with_suffix(".py").exists()
                    found.append((node.lineno, child if as_module else target))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, a.name) for a in node.names if a.name == "smq" or a.name.startswith("smq.")
            ]
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_is_in_a_layer_and_each_subpackage_says_what_it_may_import() -> None:
    for path in MODULES:
        layer_of(module_name(path))
    for folder in ("connection", "core", "operations", "client", "server/console"):
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
        assert "May import" in doc, f"smq/{folder}/__init__.py does not say what its modules may import"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_imports_flow_down_the_layers(path: Path) -> None:
    module = module_name(path)
    mine = layer_of(module)
    upward = [
        f"line {line}: {target} ({LAYERS[layer_of(target)][0]})"
        for line, target in imported(path)
        if layer_of(target) > mine
    ]
    assert not upward, f"{module} (layer {LAYERS[mine][0]}) imports from above: {upward}"


def test_the_console_is_imported_only_by_the_server() -> None:
    outside = [
        f"{module_name(path)} line {line}"
        for path in MODULES
        if not module_name(path).startswith("smq.server")
        for line, target in imported(path)
        if target.startswith("smq.server.console")
    ]
    assert not outside, outside
