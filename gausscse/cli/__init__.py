"""The console scripts' entry points: each imports its command on use, so a missing extra ends the command with one
line naming the extra to install instead of a traceback."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

# console script -> (module:function, the extra that installs what it imports)
COMMANDS = {
    "gausscse-train": ("gausscse.cli.train:run", "train"),
    "gausscse-evaluate": ("gausscse.cli.evaluate:run", "train"),
    "gausscse-precision": ("gausscse.training.precision:main", "train"),
    "gausscse-search": ("gausscse.cli.search:run", "search"),
    "gausscse-demo": ("gausscse.demo.app:main", "demo"),
}


def command(script: str) -> Callable[[], None]:
    """The entry point of ``script``: its command, imported when called."""

    def entry_point() -> None:
        target, extra = COMMANDS[script]
        module, function = target.split(":")
        try:
            run = getattr(importlib.import_module(module), function)
        except ModuleNotFoundError as error:
            missing = (error.name or "a module").split(".")[0]
            print(f"{script}: error: {missing} is not installed: pip install 'gausscse[{extra}]'", file=sys.stderr)
            raise SystemExit(2) from None
        run()

    return entry_point


# named apart from the submodules (gausscse.cli.train, ...), which importing them sets on this package
run_train, run_evaluate, run_precision, run_search, run_demo = map(command, COMMANDS)
