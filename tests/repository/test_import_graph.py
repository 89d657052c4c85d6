"""The import graph of keras_ctx has no circle (read with `ast`, nothing imported).

Nodes are the packages (`keras_ctx.models`, `keras_ctx.layers`, ...) and the
top-level modules (`keras_ctx.runs`, ...); every import counts, also one inside
a function, so a lazy import cannot hide a dependency. Inside `layers/` the
graph is drawn per module too: a layer module imports only layers (and
`keras_ctx.backend`, `keras_ctx.common.compat`, `keras_ctx.common.errors`).

The package's face, `keras_ctx/__init__.py`, is the node `keras_ctx`: it imports
every package (`import_all`), so a module that imports the face (`import
keras_ctx` to have the classes registered) closes a circle. A package's own
`__init__.py` importing its modules is inside one node.
"""

import ast
import os
import re

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "keras_ctx"))


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
    return _imports_of_tree(ast.parse(open(path, encoding="utf-8").read(), path), module,
                            is_package)


def _imports_of_tree(tree, module, is_package):
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
            if base != "keras_ctx":  # `from keras_ctx import runs` imports runs, not the face
                names.append(base)
            names += [f"{base}.{alias.name}" for alias in node.names]  # `from pkg import mod`
    return [n for n in names if n == "keras_ctx" or n.startswith("keras_ctx.")]


# A family's folder, keras_ctx/models/<family>/ (docs/design.md, "Where new code goes"),
# holds files of two layers: family.py, its registry entry, and convert*.py, the
# checkpoint maps the entry names, are the families layer (they read the models and the
# converters' machinery, data and pretraining); every other file is its model (the
# models layer). The machinery, keras_ctx/convert/, reads the maps through the registry
# only: it sits below the models, with the model handles that read every format.
FAMILY_FILE_ROLES = (("family", "keras_ctx.families"), ("convert", "keras_ctx.families"))


def _node(name, depth=2):
    """keras_ctx.models.bert.backbone -> keras_ctx.models (the first `depth` parts);
    at depth 2 a family folder's file is the node of its role (`FAMILY_FILE_ROLES`)."""
    parts = name.split(".")
    if depth == 2 and len(parts) == 4 and parts[1] == "models":
        for prefix, node in FAMILY_FILE_ROLES:
            if parts[3].startswith(prefix):
                return node
    return ".".join(parts[:depth])


def import_graph(root=ROOT, depth=2, within=None):
    """{node: {nodes it imports}}; nodes are `depth`-part names (under `within` if given)."""
    modules = _modules(root)
    graph = {}
    for module, path in modules.items():
        if within and not module.startswith(within + "."):
            continue
        source = _node(module, depth)
        targets = graph.setdefault(source, set())
        for name in _imports(path, module, path.endswith("__init__.py")):
            # `from keras_ctx.layers import attention`: the longest known module wins.
            while name not in modules and "." in name:
                name = name.rpartition(".")[0]
            if within and not name.startswith(within + "."):
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


def test_the_face_is_a_node_and_importing_it_from_below_is_a_circle(tmp_path):
    # runs.py's `import keras_ctx` (to register classes for loading) was such a circle,
    # unseen while the face was left out of the graph (issue 55).
    package = tmp_path / "keras_ctx"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("def import_all():\n    from keras_ctx import low\n")
    (package / "low" / "__init__.py").write_text("from keras_ctx import other\n")
    (package / "other.py").write_text("")
    assert import_graph(str(package))["keras_ctx.low"] == {"keras_ctx.other"}  # not the face
    assert find_circle(import_graph(str(package))) is None
    (package / "low" / "__init__.py").write_text("def load():\n    import keras_ctx\n")
    assert find_circle(import_graph(str(package))) == ["keras_ctx", "keras_ctx.low", "keras_ctx"]


def test_a_family_folders_files_are_nodes_of_their_roles(tmp_path):
    """family.py may read pretraining (which reads the models); a backbone.py may not."""
    package = tmp_path / "keras_ctx"
    for folder in ("models/toy", "pretraining", "convert", "families"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "pretraining" / "base.py").write_text("from keras_ctx.models.toy import backbone\n")
    (package / "models" / "toy" / "backbone.py").write_text("import keras\n")
    (package / "models" / "toy" / "convert.py").write_text("from keras_ctx.models.toy import backbone\n")
    (package / "models" / "toy" / "family.py").write_text(
        "from keras_ctx.pretraining import base\nfrom keras_ctx.models.toy import convert\n")
    graph = import_graph(str(package))
    assert graph["keras_ctx.families"] == {"keras_ctx.pretraining", "keras_ctx.models"}
    assert find_circle(graph) is None
    (package / "models" / "toy" / "backbone.py").write_text("from keras_ctx import pretraining\n")
    assert find_circle(import_graph(str(package))) == [
        "keras_ctx.models", "keras_ctx.pretraining", "keras_ctx.models"]


def test_no_circle_between_packages_and_top_level_modules():
    graph = import_graph()
    circle = find_circle(graph)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_only_the_command_line_imports_the_face():
    # The face imports every package: below it, a module reaches what it needs from a
    # lower layer itself, never through `import keras_ctx` (issue 55).
    importers = sorted(node for node, targets in import_graph().items() if "keras_ctx" in targets)
    assert importers == ["keras_ctx.cli"], importers


def test_no_service_registry_exists():
    # registry.provide / registry.service let the models and tasks call the model handles
    # above them without an import (issue 55). The handles now sit below the models, which
    # import them: no module hands another a function to be looked up by name.
    from keras_ctx import registry

    assert not hasattr(registry, "provide") and not hasattr(registry, "service")
    lookups = sorted(
        f"{module}:{node.lineno}" for module, path in _modules().items()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read()))
        if isinstance(node, ast.Attribute) and node.attr in ("provide", "service")
        and getattr(node.value, "id", "") in ("registry", "families"))
    assert not lookups, lookups


def test_the_registry_is_imported_under_its_own_name():
    # `from keras_ctx import registry as families` made two names for one module (issue 55).
    aliased = sorted(
        f"{module}: {alias.name} as {alias.asname}" for module, path in _modules().items()
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read()))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
        if alias.asname and alias.name.rpartition(".")[2] == "registry"
        and alias.asname != "registry")
    assert not aliased, aliased


def test_the_model_handles_sit_below_the_models_and_tasks_that_import_them():
    # Backbone.from_preset, models.from_preset and TextTask.from_preset import the resolver:
    # an import of the models (or the tasks, or the converters' tasks) by the handles, or
    # by what they read, closes a circle that the check above names.
    graph = import_graph()
    assert "keras_ctx.handles" in graph["keras_ctx.models"]
    assert "keras_ctx.handles" in graph["keras_ctx.tasks"]
    for planted in ("keras_ctx.models", "keras_ctx.tasks"):
        for below in ("keras_ctx.handles", "keras_ctx.convert", "keras_ctx.run_files"):
            wrong = {**graph, below: graph[below] | {planted}}
            assert find_circle(wrong) is not None, (below, planted)


def test_no_circle_between_layer_modules():
    circle = find_circle(import_graph(depth=3, within="keras_ctx.layers"))
    assert circle is None, "import circle in keras_ctx.layers: " + " -> ".join(circle)


@pytest.mark.parametrize("module", sorted(m for m in _modules() if m.startswith("keras_ctx.layers")))
def test_layer_modules_import_only_layers_and_compat(module):
    allowed = ("keras_ctx.layers", "keras_ctx.backend", "keras_ctx.common.compat",
               "keras_ctx.common.errors", "keras_ctx.common.validation")
    path = _modules()[module]
    outside = sorted({n for n in _imports(path, module, path.endswith("__init__.py"))
                      if n not in ("keras_ctx", "keras_ctx.common") and not n.startswith(allowed)})
    assert not outside, f"{module} imports {outside}: a layer module imports only layers"


def test_the_backend_package_imports_only_itself_and_common():
    """keras_ctx.backend sits below the layers: every package takes its backend code from
    it, so it may import nothing of theirs (no circle, no private reach into a package)."""
    for module in (m for m in _modules() if m.startswith("keras_ctx.backend")):
        path = _modules()[module]
        outside = sorted({n for n in _imports(path, module, path.endswith("__init__.py"))
                          if n not in ("keras_ctx", "keras_ctx.common")
                          and not n.startswith(("keras_ctx.backend", "keras_ctx.common."))})
        assert not outside, f"{module} imports {outside}"


def _split_imports(path, module, is_package):
    """(module-level, function-level) keras_ctx names `path` imports."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    in_function = {id(inner) for node in ast.walk(tree)
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                   for inner in ast.walk(node)}
    top, lazy = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            single = ast.Module(body=[node], type_ignores=[])
            names = _imports_of_tree(single, module, is_package)
            (lazy if id(node) in in_function else top).extend(names)
    return top, lazy


def lazy_imports_dodging_a_circle(root=ROOT):
    """['module:line -> target'] for each function-level import whose target already
    reaches the importing module through module-level imports: moved to the top, it
    would close a circle, so it exists to hide one.

    Importing `a.b.c` runs the packages `a.b` too, unless the importer is inside them
    (then they are already running); the face `keras_ctx/__init__.py` is left out.
    """
    modules = _modules(root)

    def targets(importer, name):
        while name not in modules and "." in name:
            name = name.rpartition(".")[0]
        if name not in modules or name == importer or importer.startswith(name + "."):
            return set()  # a package the importer is inside is already running
        parts = name.split(".")
        packages = {".".join(parts[:i]) for i in range(2, len(parts))}
        return {name} | {p for p in packages
                         if p in modules and not importer.startswith(p + ".")}

    graph, lazy = {}, []
    for module, path in modules.items():
        top, inner = _split_imports(path, module, path.endswith("__init__.py"))
        graph[module] = set().union(*(targets(module, n) for n in top)) - {module}
        lazy += [(module, t) for n in inner for t in targets(module, n)]

    def reaches(source, goal):
        seen, stack = set(), [source]
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack += graph.get(node, ())
        return False

    return sorted({f"{module} -> {target}" for module, target in lazy
                   if target != module and reaches(target, module)})


def test_the_lazy_import_check_finds_a_dodged_circle(tmp_path):
    package = tmp_path / "keras_ctx"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from keras_ctx.low import leaf\n")
    (package / "low" / "leaf.py").write_text("def f():\n    from keras_ctx import high\n")
    (package / "low" / "other.py").write_text("def f():\n    from keras_ctx.low import leaf\n")
    (package / "high.py").write_text("from keras_ctx.low import leaf\n")
    # leaf -> high is lazy and high imports leaf (and its package) at the top: a dodge.
    # other -> leaf is lazy, but nothing leads from leaf back to other: not one.
    assert lazy_imports_dodging_a_circle(str(package)) == ["keras_ctx.low.leaf -> keras_ctx.high"]


def test_no_function_level_import_exists_to_dodge_a_circle():
    dodges = lazy_imports_dodging_a_circle()
    assert not dodges, ("function-level imports that hide an import circle (move the code "
                        "so imports flow one way): " + "; ".join(dodges))


def test_the_package_docstring_places_every_top_level_module():
    # keras_ctx/__init__.py states the house's top level (#33): a new top-level
    # module must be placed there (face, registry, shared by every layer, alias).
    docstring = ast.get_docstring(ast.parse(open(os.path.join(ROOT, "__init__.py"),
                                                 encoding="utf-8").read()))
    named = set(re.findall(r"`([a-z_]+)`", docstring))
    present = {name.removesuffix(".py") for name in os.listdir(ROOT)
               if (name.endswith(".py") and name != "__init__.py")
               or os.path.isfile(os.path.join(ROOT, name, "__init__.py"))}
    assert present <= named, f"top-level modules the docstring does not place: {present - named}"


# A model reads nothing above it: a backbone built in a user's own Keras code needs no
# data pipeline, objective or task (docs/design.md, "The house"); its `from_preset` reads
# checkpoints through the model handles, below it.
MODELS_READ = {"keras_ctx.models", "keras_ctx.layers", "keras_ctx.backend", "keras_ctx.common",
               "keras_ctx.registry", "keras_ctx.handles"}


def test_models_import_only_layers_backend_common_and_the_registry():
    graph = import_graph()
    assert graph["keras_ctx.models"] - MODELS_READ == set()
