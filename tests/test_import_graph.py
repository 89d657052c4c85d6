"""The import graph of keras_ctx has no circle (read with `ast`, nothing imported).

Nodes are the packages (`keras_ctx.models`, `keras_ctx.layers`, ...) and the
top-level modules (`keras_ctx.runs`, ...); every import counts, also one inside
a function, so a lazy import cannot hide a dependency. Inside `layers/` the
graph is drawn per module too: a layer module imports only layers (and
`keras_ctx.compat`, `keras_ctx.errors`).

The package's face, `keras_ctx/__init__.py`, imports its subpackages for users
and is not a node (it imports everything by design). Likewise a package's own
`__init__.py` importing its modules is inside one node.
"""

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras_ctx")


def _modules(root=ROOT):
    """{dotted module name: path} of every .py file under `root`."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                relative = os.path.relpath(os.path.join(folder, name), os.path.dirname(root))
                dotted = relative[:-3].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = os.path.join(folder, name)
    return found


def _imports(path, module, is_package):
    """Dotted names `path` imports (absolute and relative, at any depth of the file)."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    package = module if is_package else module.rpartition(".")[0]
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]  # `from pkg import mod`
    return [n for n in names if n == "keras_ctx" or n.startswith("keras_ctx.")]


def _node(name, depth=2):
    """keras_ctx.models.bert -> keras_ctx.models (the first `depth` parts)."""
    return ".".join(name.split(".")[:depth])


def import_graph(root=ROOT, depth=2, within=None):
    """{node: {nodes it imports}}; nodes are `depth`-part names (under `within` if given)."""
    modules = _modules(root)
    graph = {}
    for module, path in modules.items():
        if module == "keras_ctx" or (within and not module.startswith(within + ".")):
            continue
        source = _node(module, depth)
        targets = graph.setdefault(source, set())
        for name in _imports(path, module, path.endswith("__init__.py")):
            # `from keras_ctx.layers import attention`: the longest known module wins.
            while name not in modules and "." in name:
                name = name.rpartition(".")[0]
            if name == "keras_ctx" or (within and not name.startswith(within + ".")):
                continue
            target = _node(name, depth)
            if target != source:
                targets.add(target)
    return graph


def find_circle(graph):
    """One circle of `graph` as [a, b, ..., a], or None (depth-first search)."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state:
                circle = visit(target, path)
                if circle:
                    return circle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            circle = visit(node, [])
            if circle:
                return circle
    return None


def test_find_circle_names_a_circle_and_passes_a_tree():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "keras_ctx"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "leaf.py").write_text("def f():\n    from keras_ctx import high\n")
    (package / "high.py").write_text("from .low import leaf\n")
    graph = import_graph(str(package))
    assert graph["keras_ctx.low"] == {"keras_ctx.high"}
    assert graph["keras_ctx.high"] == {"keras_ctx.low"}
    assert find_circle(graph) == ["keras_ctx.high", "keras_ctx.low", "keras_ctx.high"]


# Edges that close a circle today, in files other work owns right now; each
# is to go (and this table with it), never to grow:
# - data/prepare.py reads the tokenizer kept in a prepared directory through
#   runs (runs -> fingerprints -> data): save/load_tokenizer belong in data.
# - pretraining's one-release alias `keras_ctx.pretraining.GPTFineTuner`
#   (moved to tasks/gpt_finetuner.py) reaches tasks from a module __getattr__.
KNOWN_TIES = {("keras_ctx.data", "keras_ctx.runs"),
              ("keras_ctx.pretraining", "keras_ctx.tasks")}


def test_no_circle_between_packages_and_top_level_modules():
    graph = import_graph()
    for source, target in KNOWN_TIES:
        graph[source].discard(target)
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_no_circle_between_layer_modules():
    circle = find_circle(import_graph(depth=3, within="keras_ctx.layers"))
    assert circle is None, "import circle in keras_ctx.layers: " + " -> ".join(circle)


@pytest.mark.parametrize("module", sorted(m for m in _modules() if m.startswith("keras_ctx.layers")))
def test_layer_modules_import_only_layers_and_compat(module):
    allowed = ("keras_ctx.layers", "keras_ctx.compat", "keras_ctx.errors")
    path = _modules()[module]
    outside = sorted({n for n in _imports(path, module, path.endswith("__init__.py"))
                      if n != "keras_ctx" and not n.startswith(allowed)})
    assert not outside, f"{module} imports {outside}: a layer module imports only layers"
