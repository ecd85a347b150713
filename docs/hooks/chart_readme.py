"""mkdocs hook: the Helm chart's README (helm/pulsar-lb-operator/README.md) as the site's page chart.md.

The chart's README lives beside the chart, where `helm` users and the repository's web view find it; the
site shows it too, so that the docs link to its sections and `mkdocs build --strict` checks those links
and the chart README's own links into docs/. Links are written for the repository (the chart README
points at ../../docs/PAGE.md, a docs page at ../helm/pulsar-lb-operator/README.md) and rewritten here for
the site.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

CHART_README = "helm/pulsar-lb-operator/README.md"
PAGE = "chart.md"
TO_CHART = re.compile(r"\]\(((?:\.\./)+)helm/pulsar-lb-operator/README\.md")


def on_files(files: Files, config: Any) -> Files:
    root = Path(config.config_file_path).parent
    text = (root / CHART_README).read_text()
    text = text.replace("](../../docs/", "](")
    files.append(File.generated(config, PAGE, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    if page.file.src_uri == PAGE:
        return markdown
    target = posixpath.relpath(PAGE, posixpath.dirname(page.file.src_uri) or ".")
    return TO_CHART.sub(f"]({target}", markdown)
