"""MkDocs hook: pages link to files of the repository outside `docs/` by their relative path.

A page links to a study's committed report, plots or summary by its path relative to the page's own
file (`../../experiments/rank_collapse/results/report.md` from `docs/studies/rank_collapse.md`), so
the link works where the Markdown is read in the repository. For the site, this hook adds each such
file at its repository path (`experiments/rank_collapse/results/report.md`); a linked Markdown file
becomes a page outside the navigation, and the files it links to are added in turn. Every link of a
page is then rewritten to the site's path of its target. A link to a file that does not exist is
left as written, for MkDocs to report (a warning; an error under `--strict`).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File, InclusionLevel

# The target of an inline Markdown link or image, `[text](target)` or `![alt](target "title")`.
LINK = re.compile(r"(?<=\]\()([^)\s]+)")


def _is_relative(target: str) -> bool:
    """Whether a link target is a relative file path (no URL scheme, not absolute, not an anchor)."""
    return ":" not in target and not target.startswith(("#", "/"))


def _roots(config) -> tuple[Path, Path]:
    docs = Path(config.docs_dir).resolve()
    return docs, Path(config.config_file_path).resolve().parent


def _site_uri(path: Path, docs: Path, repo: Path) -> str | None:
    """The site path of the repository file `path`: relative to `docs/` inside it, else to the
    repository; None outside the repository."""
    for root in (docs, repo):
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return None


def _resolve(file: File, target: str, docs: Path, repo: Path) -> tuple[str, str] | None:
    """`(site path of the target file, anchor)` for a link of `file`, None if it names no file."""
    path, _, anchor = target.partition("#")
    resolved = (Path(file.abs_src_path).parent / path).resolve()
    if not resolved.is_file():
        return None
    uri = _site_uri(resolved, docs, repo)
    return None if uri is None else (uri, anchor)


def on_files(files, config):
    """Add every repository file outside `docs/` that a page links to, transitively."""
    docs, repo = _roots(config)
    pages = list(files.documentation_pages())
    while pages:
        page = pages.pop()
        for target in LINK.findall(Path(page.abs_src_path).read_text(encoding="utf-8")):
            found = _resolve(page, target, docs, repo) if _is_relative(target) else None
            if found is None or files.get_file_from_path(found[0]) is not None:
                continue
            added = File(
                found[0],
                src_dir=str(repo),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
                inclusion=InclusionLevel.NOT_IN_NAV,
            )
            files.append(added)
            if added.is_documentation_page():
                pages.append(added)
    return files


def on_page_markdown(markdown, page, config, files):
    """Point each link of the page at its target's site path, relative to the page's."""
    docs, repo = _roots(config)
    here = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match) -> str:
        target = match.group(1)
        found = _resolve(page.file, target, docs, repo) if _is_relative(target) else None
        if found is None:
            return target
        uri, anchor = found
        return posixpath.relpath(uri, here or ".") + (f"#{anchor}" if anchor else "")

    return LINK.sub(rewrite, markdown)
