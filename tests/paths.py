"""Where the repository is, for tests that read committed files or start commands there."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
