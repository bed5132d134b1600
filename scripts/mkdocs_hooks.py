"""The docs site's build hooks (mkdocs.yml ``hooks``): CHANGELOG.md's links made the site's.

CHANGELOG.md, at the repository's root, links a page of the docs as
``docs/upgrading.md``. docs/changelog.md includes it (pymdownx.snippets), and
there that page is ``upgrading.md``. On that page only, the links are rewritten
after the include and before MkDocs checks them, so --strict checks them too.
"""

from __future__ import annotations

import re
from typing import Any

from markdown import Extension, Markdown
from markdown.preprocessors import Preprocessor

CHANGELOG_PAGE = "changelog.md"
# An inline link's target, or a reference definition's, that starts with docs/.
DOCS_LINK = re.compile(r"(\]\(<?|^\s{0,3}\[[^\]]+\]:\s*<?)docs/")


class RootLinks(Preprocessor):
    # The page being rendered: MkDocs renders one page at a time, right after its on_page_markdown.
    page: str | None = None

    def run(self, lines: list[str]) -> list[str]:
        if RootLinks.page != CHANGELOG_PAGE:
            return lines
        return [DOCS_LINK.sub(r"\1", line) for line in lines]


class RootLinksExtension(Extension):
    def extendMarkdown(self, md: Markdown) -> None:  # noqa: N802 - Markdown's name
        # Below pymdownx.snippets' priority (32): it runs once the file is included.
        md.preprocessors.register(RootLinks(md), "jobqueue_root_links", 31)


def on_config(config: Any) -> Any:
    config.markdown_extensions.append(RootLinksExtension())
    return config


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    RootLinks.page = page.file.src_uri
    return markdown
