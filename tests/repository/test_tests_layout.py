"""The tests' own layout (issue 55): a test file lives in the folder of the unit it tests,
a helper is defined once (one name, one meaning) and no test module is imported as a library."""

import ast
import collections
import pathlib

import pytest

pytestmark = pytest.mark.backend_neutral("the layout of tests/")

TESTS = pathlib.Path(__file__).resolve().parents[1]

# Names that may be defined in several modules: a helper script's entry point.
MAY_REPEAT = {"main"}

def test_no_test_file_at_the_root_of_tests():
    found = sorted(path.name for path in TESTS.glob("test_*.py"))
    assert not found, (f"test files at tests/'s root: move them into the folder of the unit "
                       f"they test (tests/<unit>/): {found}")


def test_every_folder_of_tests_is_a_package():
    """Test files of the same name in two folders collect only as two packages' modules."""
    folders = {path.parent for path in TESTS.rglob("*.py")}
    assert not [str(f) for f in folders if not (f / "__init__.py").is_file()]


def _is_fixture(node):
    return any(ast.unparse(getattr(d, "func", d)).endswith("fixture") for d in node.decorator_list)


def helper_definitions(root):
    """{name: [module path, ...]} of the module-level functions and classes under `root`,
    leaving out tests (`test_*`, `Test*`) and pytest fixtures (conftest.py shares those)."""
    found = collections.defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, (ast.FunctionDef, ast.ClassDef))
                    and not node.name.lower().startswith("test")
                    and not (isinstance(node, ast.FunctionDef) and _is_fixture(node))):
                found[node.name].append(str(path.relative_to(root)))
    return found


def test_the_check_finds_a_helper_defined_twice_and_leaves_tests_and_fixtures(tmp_path):
    (tmp_path / "a").mkdir()
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / "a" / name).write_text(
            "import pytest\n\ndef _inputs():\n    pass\n\ndef test_x():\n    pass\n\n"
            "@pytest.fixture\ndef corpus():\n    pass\n\nclass TestY:\n    pass\n")
    assert dict(helper_definitions(tmp_path)) == {
        "_inputs": ["a/test_one.py", "a/test_two.py"]}


def test_a_helper_name_is_defined_once():
    found = helper_definitions(TESTS)
    repeated = {name: paths for name, paths in found.items() if len(paths) > 1}
    unlisted = {name: paths for name, paths in repeated.items() if name not in MAY_REPEAT}
    assert not unlisted, (
        "helpers defined in several test modules: put one in a shared helper module "
        "(tests/tiny.py, tests/cli_helpers.py, ...) or rename each to say what it builds: "
        f"{unlisted}")


def _test_modules_imported(path):
    """The test modules (`test_*`) that the file at `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests"):
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if n.startswith("tests") and
                  n.rsplit(".", 1)[-1].startswith("test_")]
    return found


def test_no_test_module_is_imported_as_a_library(tmp_path):
    """Shared fixtures live in conftest.py and shared helpers in helper modules."""
    bad = tmp_path / "test_x.py"
    bad.write_text("from tests.convert import test_elmo_hdf5\nimport tests.test_cli\n")
    assert _test_modules_imported(bad) == ["tests.convert.test_elmo_hdf5", "tests.test_cli"]
    found = {str(path.relative_to(TESTS)): _test_modules_imported(path)
             for path in TESTS.rglob("*.py")}
    assert not {path: names for path, names in found.items() if names}
