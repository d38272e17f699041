"""The docs' Python against the SDK: what a new user copies must exist and parse.

Every method a docs table names in its Python column is an attribute of one of the SDK's public
classes, and each keyword argument it shows one that a method of that name takes; every Python block of
README.md and docs/ parses; README.md's example is examples/python's
run_with_state.py, which tests/e2e/test_examples.py runs against a real server.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

import lizard

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", ROOT / "sdk" / "python" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CALL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\(")
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _cells(line: str) -> List[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def python_column_calls() -> Iterator[Tuple[str, str, str]]:
    """(file, row, name) for each call in the Python column of a table headed "| Python | ..."."""
    for doc in DOCS:
        col = -1
        for line in doc.read_text().splitlines():
            if not line.startswith("|"):
                col = -1
                continue
            cells = _cells(line)
            if "Python" in cells and "TypeScript" in cells:
                col = cells.index("Python")
                continue
            if col < 0 or col >= len(cells) or set(line) <= set("|- "):
                continue
            for name in CALL.findall(cells[col]):
                yield doc.name, cells[col], name


def sdk_names() -> Set[str]:
    names: Set[str] = set(dir(builtins))  # str(err)
    for _, obj in inspect.getmembers(lizard):
        if inspect.isclass(obj) and obj.__module__.startswith("lizard"):
            names.add(obj.__name__)
            names.update(n for n in dir(obj) if not n.startswith("__"))
    return names


def test_tables_name_methods_the_sdk_has() -> None:
    have = sdk_names()
    calls = list(python_column_calls())
    assert len(calls) > 40, f"found {len(calls)} calls in the docs' Python columns: the parsing is broken"
    missing = sorted({f"{doc}: {name}( in {row!r}" for doc, row, name in calls if name not in have})
    assert not missing, "the docs name calls the Python SDK lacks:\n" + "\n".join(missing)


def sdk_params() -> Dict[str, Set[str]]:
    """Each public method's name → the parameter names of every SDK method of that name ("*" for **kwargs)."""
    params: Dict[str, Set[str]] = {}
    for _, obj in inspect.getmembers(lizard):
        if not (inspect.isclass(obj) and obj.__module__.startswith("lizard")):
            continue
        for name, fn in inspect.getmembers(obj, callable):
            if name.startswith("_"):
                continue
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            got = params.setdefault(name, set())
            for p in sig.parameters.values():
                got.add("*" if p.kind is p.VAR_KEYWORD else p.name)
    return params


def test_tables_name_arguments_the_sdk_takes() -> None:
    params = sdk_params()
    wrong = set()
    for doc, row, name in python_column_calls():
        for args in re.findall(r"\b" + re.escape(name) + r"\(([^()]*)\)", row):
            for kw in re.findall(r"\b([a-z_][a-z0-9_]*)=", args):
                have = params.get(name, set())
                if have and kw not in have and "*" not in have:
                    wrong.add(f"{doc}: {name}({kw}=...) in {row!r}")
    assert not wrong, "the docs pass arguments the Python SDK's calls do not take:\n" + "\n".join(sorted(wrong))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_python_blocks_parse(doc: Path) -> None:
    for block in BLOCK.findall(doc.read_text()):
        compile(block, str(doc), "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def _code(text: str) -> List[str]:
    """Code lines without comments, blank lines or a module docstring."""
    tree = ast.parse(text)
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) else tree.body
    src = ast.unparse(ast.Module(body=body, type_ignores=[]))
    return [line for line in src.splitlines() if line.strip()]


@pytest.mark.parametrize("readme", ["README.md", "sdk/python/README.md"])
def test_readme_example_is_the_tested_one(readme: str) -> None:
    first = BLOCK.search((ROOT / readme).read_text())
    assert first, f"{readme} has no Python block"
    example = (ROOT / "examples" / "python" / "run_with_state.py").read_text()
    assert _code(first.group(1)) == _code(example), (
        f"{readme}'s example differs from examples/python/run_with_state.py, which the tests run"
    )
