"""No function of the library (src/), of the module's bindings (python/src/) or of the Python
package longer than 80 lines, but a table: a function that long does several jobs, and each
job reads better under its own name (issue 26). Measured by lizard (PyPI), which parses C++
and Python functions."""
import pathlib

import pytest

from conftest import REPO

lizard = pytest.importorskip("lizard", reason="python/run_tests.sh installs lizard from PyPI")

MAX_LINES = 80
# Tables, which read as one list however long they are: name -> why.
TABLES = {
    "tokenfeed::key_handlers": "the config keys' parsers and printers, one row per key",
}


def long_functions(paths):
    found = []
    for path in paths:
        for function in lizard.analyze_file(str(path)).function_list:
            if function.length > MAX_LINES and function.name not in TABLES:
                found.append(f"{path}:{function.start_line}: {function.name} is {function.length} lines")
    return found


def sources():
    """The library, the Python module's bindings and the Python package."""
    cpp = [p for folder in ("src", "python/src") for p in (REPO / folder).rglob("*") if p.suffix in (".cpp", ".hpp")]
    return cpp + sorted((REPO / "python" / "tokenfeed").glob("*.py"))


def test_no_function_is_longer_than_80_lines_but_a_table():
    assert long_functions(sources()) == []


def test_every_table_exception_is_still_a_long_function():
    names = {f.name for p in sources() if p.suffix == ".cpp" for f in lizard.analyze_file(str(p)).function_list
             if f.length > MAX_LINES}
    assert set(TABLES) <= names, f"remove from TABLES what is no longer long: {sorted(set(TABLES) - names)}"


def test_the_check_sees_a_long_function(tmp_path):
    planted = tmp_path / "planted.cpp"
    body = "".join(f"  x += {i};\n" for i in range(MAX_LINES))
    planted.write_text(f"int long_one(int x) {{\n{body}  return x;\n}}\nint short_one() {{ return 1; }}\n")
    python = tmp_path / "planted.py"
    python.write_text("def long_one(x):\n" + "".join(f"    x += {i}\n" for i in range(MAX_LINES)) + "    return x\n")
    found = long_functions([planted, python])
    assert len(found) == 2 and all("long_one" in line for line in found), found
