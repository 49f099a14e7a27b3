"""The layout stays what docs/architecture.md says: layers, no import cycles, short modules.

Imports are read from the source (every `import` and `from ... import`, inside functions and
under TYPE_CHECKING too), so a lazy import cannot hide a cycle or a reach into a higher layer.
"""

from __future__ import annotations

import ast
import re
from importlib import import_module
from pathlib import Path

import pytest

from simconform.registry import BACKENDS, CONVENTIONS, EMULATE, EXPORTERS

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 400
SLACK = 50  # "about 400": beyond 450 a module says why at its top

# Layer of each module, lowest first: "a.b" is exactly that module, "a.b.**" the package a.b
# and everything in it; an exact entry wins, then the longest package. An import may go to the
# same layer or an earlier one, never to a later one (docs/architecture.md has the picture).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "core",
        (
            "simconform",
            "simconform.errors",
            "simconform.fields",
            "simconform.frames",
            "simconform.angles",
            "simconform.spec",
            "simconform.world",
            "simconform.trajectory",
            "simconform.stamps",
            "simconform.raycast",
            "simconform.meshcast",
            "simconform.slab",
            "simconform.bvh",
            "simconform.bvhcast",
            "simconform.bvhworld",
            "simconform.actors",
            "simconform.registry",
            "simconform.demo",
            "simconform.provenance",
            "simconform.outdir",
            "simconform.outlock",
            "simconform.ownership",
            "simconform.lifeline",
            "simconform.jitwarm",
            "simconform.progress",
        ),
    ),
    ("truth types", ("simconform.adapters", "simconform.adapters.base")),
    ("pipeline", ("simconform.pipeline.**",)),
    ("bag", ("simconform.bag.**",)),
    ("engines", ("simconform.adapters.**",)),
    (
        "run",
        (
            "simconform.run",
            "simconform.prefetch",
            "simconform.slots",
            "simconform.feed",
            "simconform.probe",
            "simconform.doctor",
            "simconform.budget",
            "simconform.runplan",
        ),
    ),
    ("verify", ("simconform.verify.**",)),
    ("compare", ("simconform.verify.compare.**",)),
    ("downstream", ("simconform.downstream.**",)),
    ("export", ("simconform.export.**",)),
    ("campaign", ("simconform.campaign.**",)),
    ("cli", ("simconform.cli.**", "simconform.launch", "simconform.__main__")),
]


def _modules() -> dict[str, Path]:
    """simconform module name -> source file, through pyproject's package-dir mapping."""
    text = (REPO / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-dir]")[1].split("\n[")[0]
    pairs = re.findall(r'^"(simconform\.\w+)" = "([\w/]+)"$', section, re.M)
    roots = {"simconform": "simconform"} | dict(pairs)
    mods: dict[str, Path] = {}
    for pkg, folder in roots.items():
        for f in sorted((REPO / folder).rglob("*.py")):
            parts = list(f.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([pkg, *parts])
            if pkg == "simconform" and parts and f"simconform.{parts[0]}" in roots:
                continue  # a mapped root folder is listed under its own name
            mods[name] = f
    return mods


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The simconform modules `name` imports, anywhere in its source."""
    out: set[str] = set()
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            targets = [mod, *(f"{mod}.{a.name}" for a in node.names)]
        else:
            continue
        out.update(t for t in targets if t in MODULES and t != name)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def layer(name: str) -> int:
    best, rank = -1, -1
    for i, (_label, entries) in enumerate(LAYERS):
        for e in entries:
            if e == name:
                return i
            stem = e.removesuffix(".**")
            inside = name == stem or name.startswith(stem + ".")
            if e.endswith(".**") and inside and len(stem) > best:
                best, rank = len(stem), i
    assert rank >= 0, f"{name} is in no layer; add it to LAYERS and docs/architecture.md"
    return rank


def test_every_import_goes_to_the_same_or_a_lower_layer() -> None:
    up = [
        f"{a} ({LAYERS[layer(a)][0]}) imports {b} ({LAYERS[layer(b)][0]})"
        for a, deps in sorted(GRAPH.items())
        for b in sorted(deps)
        if layer(b) > layer(a)
    ]
    assert not up, "\n".join(up)


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_long_modules_say_why_at_the_top() -> None:
    silent = []
    for path in MODULES.values():
        n = len(path.read_text().splitlines())
        if n > MAX_LINES + SLACK:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            if "Length:" not in doc:
                silent.append(f"{path.relative_to(REPO)}: {n} lines")
    assert not silent, "add a 'Length: ... because ...' paragraph to: " + ", ".join(silent)


def test_the_command_line_library_stays_in_the_cli() -> None:
    users = [
        n for n, p in MODULES.items() if not n.startswith("simconform.cli") and _uses(p, "typer")
    ]
    assert not users, users


def _uses(path: Path, package: str) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == package for a in node.names
        ):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            return True
    return False


@pytest.mark.parametrize("registry", [BACKENDS, EMULATE, CONVENTIONS, EXPORTERS])
def test_every_registry_entry_names_an_existing_attribute(registry) -> None:
    """Without importing optional engines: the module's source defines the attribute."""
    for name, target in registry.items():
        module, attr = target.split(":")
        path = MODULES.get(module)
        assert path is not None, f"{registry.kind} {name}: no module {module}"
        tree = ast.parse(path.read_text())
        defined = {
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
        }
        defined |= {
            a.name.split(".")[0]
            for n in tree.body
            if isinstance(n, ast.ImportFrom)
            for a in n.names
            if a.asname is None
        } | {
            a.asname
            for n in tree.body
            if isinstance(n, ast.ImportFrom)
            for a in n.names
            if a.asname
        }
        assert attr in defined, f"{registry.kind} {name}: {module} defines no {attr}"


def test_reference_backend_and_conventions_load_through_the_registry() -> None:
    assert BACKENDS.load("reference").__name__ == "ReferenceBackend"
    assert CONVENTIONS.load("ros") is not CONVENTIONS.load("unity")
    assert callable(EXPORTERS.load("sdf"))
    assert import_module("simconform.cli").app is not None
