"""Where the repository is, for tests that read committed files or start commands there."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

DOCS = REPO / "docs"


def study_page(study: str) -> Path:
    """The documentation page of `study`, which shows its committed results: `docs/studies/<study>.md`."""
    return DOCS / "studies" / f"{study}.md"


def link_from(page: Path, path: str) -> str:
    """`path`, relative to the repository root, as a relative link from the Markdown file `page`."""
    return Path(os.path.relpath(REPO / path, page.parent)).as_posix()
