"""Lines of the package's Python files by kind (code, docstrings, comments, blank) and by folder.

python scripts/package_size.py
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gausscse"


def line_kinds(source: str) -> Counter:
    """How many lines of ``source`` are docstrings, comments, blank or code."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, first.end_lineno + 1))
    kinds = Counter()
    for number, line in enumerate(source.splitlines(), start=1):
        stripped = line.strip()
        kind = (
            "docstring"
            if number in docstrings
            else "blank"
            if not stripped
            else "comment"
            if stripped[0] == "#"
            else "code"
        )
        kinds[kind] += 1
    return kinds


def main() -> None:
    package = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else PACKAGE
    total, by_folder = Counter(), Counter()
    for path in sorted(package.rglob("*.py")):
        kinds = line_kinds(path.read_text(encoding="utf-8"))
        total += kinds
        by_folder[str(path.parent.relative_to(package.parent))] += sum(kinds.values())
    print(
        f"gausscse/: {sum(total.values())} lines — "
        + ", ".join(f"{kind} {total[kind]}" for kind in ("code", "docstring", "comment", "blank"))
    )
    for folder, lines in sorted(by_folder.items()):
        print(f"  {folder}: {lines}")


if __name__ == "__main__":
    main()
