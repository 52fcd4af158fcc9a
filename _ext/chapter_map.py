"""The README's chapter map, generated from ``_toc.yml`` and each chapter's title.

``python _ext/chapter_map.py`` rewrites the table between the two markers in README.md; tests/book/test_book.py
fails when the README's map differs from the one this builds (a chapter added, moved or retitled).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- chapter map: python _ext/chapter_map.py -->", "<!-- end of chapter map -->"


def chapter_map() -> str:
    """A Markdown table: part, the book's chapter number (numbered parts count on), file, title."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    rows, number = ["| part | chapter | file | title |", "| --- | --- | --- | --- |"], 0
    for part in toc.get("parts", []):
        for entry in part["chapters"]:
            name = entry["file"].removesuffix(".md")
            path = ROOT / f"{name}.md"
            title = re.search(r"^# (.+)$", path.read_text(), re.M)[1]
            if part.get("numbered"):
                number += 1
            label = str(number) if part.get("numbered") else ""
            rows.append(f"| {part['caption']} | {label} | `{name}.md` | {title} |")
    return "\n".join(rows)


def readme_with_map(readme: str) -> str:
    """``readme`` with the table between the markers replaced by :func:`chapter_map`."""
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + "\n" + chapter_map() + "\n" + readme[end:]


if __name__ == "__main__":
    path = ROOT / "README.md"
    path.write_text(readme_with_map(path.read_text()))
    print("chapter map written:", path.relative_to(ROOT))
