"""A Jupyter notebook's code cells run as Python, in order, in one namespace: what a kernel would run.

    python -m tests.notebook NOTEBOOK RECORD

Shell and magic lines (`!...`, `%...`) are left out (blanked, so line numbers in a traceback stay
those of the cell); `split_shell_lines` returns them, for a test to say which may be left out.
The cells' own `import`s of `IPython.display` get a recorder instead, so nothing of Jupyter is
needed: `display(Markdown(text))` and `display(Image(path))` are recorded, and written to RECORD as
JSON (`[["markdown", text] | ["image", path], ...]`). The recorder is not in `sys.modules`, so the
libraries the cells import see no IPython (as in a plain Python process). Nothing else is imported
here, so the cells run in a process that only they have set up.
"""

from __future__ import annotations

import builtins
import json
import sys
import types
from pathlib import Path


def code_cells(notebook: Path) -> list[str]:
    """The source of each code cell of `notebook` (a .ipynb file), in order."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    return [
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in cells
        if c["cell_type"] == "code"
    ]


def split_shell_lines(source: str) -> tuple[str, list[str]]:
    """A cell's Python, with its shell and magic lines blanked, and those lines (stripped)."""
    python, shell = [], []
    for line in source.splitlines():
        if line.lstrip().startswith(("!", "%")):
            shell.append(line.strip())
            line = ""
        python.append(line)
    return "\n".join(python), shell


def markdown(text: str) -> list:
    """The recorder's `IPython.display.Markdown`."""
    return ["markdown", text]


def image(path) -> list:
    """The recorder's `IPython.display.Image` (of a file)."""
    return ["image", str(path)]


def importing_recorder(display: types.ModuleType):
    """`__import__` that gives `display` for `IPython.display` (and a package holding it for
    `import IPython.display`), and imports everything else as usual."""
    package = types.ModuleType("IPython")
    package.display = display

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name in ("IPython", "IPython.display"):
            return display if fromlist and name == "IPython.display" else package
        return builtins.__import__(name, globals, locals, fromlist, level)

    return import_


def run_cells(notebook: Path, record: Path) -> None:
    """Run the code cells of `notebook` here; write what they displayed to `record`."""
    shown = []
    display = types.ModuleType("IPython.display")
    display.Markdown, display.Image, display.display = markdown, image, shown.append
    own_builtins = {**vars(builtins), "__import__": importing_recorder(display)}
    namespace = {"__name__": "__main__", "__builtins__": own_builtins}
    for index, source in enumerate(code_cells(notebook)):
        python, _ = split_shell_lines(source)
        exec(compile(python, f"<cell {index}>", "exec"), namespace)
    Path(record).write_text(json.dumps(shown))


if __name__ == "__main__":
    run_cells(Path(sys.argv[1]), Path(sys.argv[2]))
