"""Result titles with the paper's number first (STYLE.md M1): a Sphinx extension over sphinx-proof's blocks.

sphinx-proof titles a block ``{prf:lemma} Jacobian of self-attention (Lemma C.2)`` with ``:nonumber:`` as
"Lemma (Jacobian of self-attention (Lemma C.2))", burying the number a reader scans for. Here, when the doctree
is read, a title that ends in a reference of the block's own kind is rewritten so that the page reads

- "Lemma C.2 (Jacobian of self-attention)" for ``... (Lemma C.2)``,
- "Proposition 3.6, C.8 (Exponential lower bound)" for ``... (Proposition 3.6, C.8)``,
- "Theorem 4.4 (Masked mean-field bound, corrected)" for ``... (Theorem 4.4, corrected)``,
- "Theorem 3.2 of Kim et al. (Lipschitz bound)" for ``... (Kim et al., Theorem 3.2)``,

and any other final parenthesis is folded into the name instead of nesting: ``masked lower bound (this book)``
reads "Proposition (masked lower bound, this book)", ``Masked attention (Theorem 4.5)`` in a remark reads
"Remark (Masked attention, Theorem 4.5)". The number is an ``inline`` of class ``proof-number`` right after
sphinx-proof's ``caption-number`` span. A ``{prf:ref}`` with its own text prints that text, as before; one
without text to an unnumbered block, which sphinx-proof prints as a bare "Lemma", prints "Lemma C.2".
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx_proof.nodes import unenumerable_node

KINDS = ("Axiom", "Theorem", "Lemma", "Definition", "Remark", "Conjecture", "Corollary", "Algorithm", "Criterion",
         "Example", "Property", "Observation", "Proposition", "Assumption", "Notation")
_NUMBER = r"(?:[A-Z]\.?)?\d+(?:\.\d+)*"
# A reference to a result of a paper: "Lemma C.2", "Proposition 3.6, C.8", "Kim et al., Theorem 3.2", then an
# optional qualifier after a comma ("corrected", "finite $n$").
REFERENCE = re.compile(
    r"^(?:(?P<who>[A-Z][\w'’-]+(?: et al\.| (?:and|&) [A-Z][\w'’-]+)?),\s+)?"
    rf"(?P<kind>{'|'.join(KINDS)})s?\s+(?P<numbers>{_NUMBER}(?:\s*(?:,|and)\s*{_NUMBER})*)"
    r"(?P<rest>(?:,\s+.*)?)$",
    re.S,
)


def _strip_text(node: nodes.Node, left: int = 0, right: int = 0) -> nodes.Node | None:
    """Text ``node`` without ``left`` characters at its start and ``right`` at its end (None when empty);
    any other node unchanged."""
    if not isinstance(node, nodes.Text):
        return node
    text = str(node)[left: len(node) - right]
    return nodes.Text(text) if text else None


def split_trailing_parenthesis(children: list[nodes.Node]) -> tuple[list[nodes.Node], list[nodes.Node]] | None:
    """``children`` of a title split into the name and the content of its final parenthesis ("Name (ref)"), or
    None when the title does not end in one, or is nothing but one. Only text counts parentheses: math and code
    inside the parenthesis are kept whole."""
    if not children or not isinstance(children[-1], nodes.Text) or not str(children[-1]).rstrip().endswith(")"):
        return None
    depth = 0
    for i in range(len(children) - 1, -1, -1):
        child = children[i]
        if not isinstance(child, nodes.Text):
            continue
        text = str(child).rstrip() if i == len(children) - 1 else str(child)
        for j in range(len(text) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(text[j], 0)
            if depth == 0:
                name = [*children[:i], nodes.Text(text[:j].rstrip())]
                inside = [nodes.Text(text[j + 1:]), *children[i + 1:]]
                inside[-1] = _strip_text(inside[-1], right=len(str(inside[-1])) - str(inside[-1]).rstrip().rfind(")"))
                name = [n for n in name if not (isinstance(n, nodes.Text) and not str(n))]
                inside = [n for n in inside if n is not None and not (isinstance(n, nodes.Text) and not str(n))]
                if not any(n.astext().strip() for n in name):
                    return None
                return name, inside
    return None


def retitle(children: list[nodes.Node], kind: str) -> tuple[str | None, list[nodes.Node]]:
    """The number (or None) and the name that a block of ``kind`` shows for the title ``children`` (the text of
    its argument, without sphinx-proof's " (...)"), as described in the module: a reference of the block's own
    kind comes first; any other final parenthesis joins the name after a comma."""
    whole = "".join(n.astext() for n in children).strip()
    only = REFERENCE.match(whole) if all(isinstance(n, nodes.Text) for n in children) else None
    if only and only["kind"].lower() == kind.lower():
        return _number(only), ([nodes.Text(only["rest"].lstrip(", "))] if only["rest"] else [])
    split = split_trailing_parenthesis(children)
    if split is None:
        return None, children
    name, inside = split
    head = inside[0] if inside and isinstance(inside[0], nodes.Text) else nodes.Text("")
    # the reference itself must be plain text; a qualifier after its comma may hold math
    m = REFERENCE.match(str(head))
    if m and m["kind"].lower() == kind.lower():
        rest = [n for n in (_strip_text(nodes.Text(m["rest"]), left=len(m["rest"]) - len(m["rest"].lstrip(", "))),
                            *inside[1:]) if n is not None]
        return _number(m), [*name, *([nodes.Text(", "), *rest] if rest else [])]
    return None, [*name, nodes.Text(", "), *inside]


def _number(m: re.Match[str]) -> str:
    return m["numbers"] + (f" of {m['who']}" if m["who"] else "")


def retitle_results(app: Sphinx, doctree: nodes.document) -> None:
    """Rewrite the title of every sphinx-proof block of the document just read (see the module)."""
    env = app.env
    found = getattr(env, "lipnb_proof_numbers", {})
    env.lipnb_proof_numbers = found
    fmt = app.config.proof_title_format
    before, after = fmt.split("%t")
    for block in doctree.findall(nodes.Element):
        realtype = block.get("realtype")
        if not realtype or not block.children or not isinstance(block[0], nodes.title) or not block.get("title"):
            continue
        title = block[0]
        children = list(title.children)
        if not (children and isinstance(children[0], nodes.Text) and str(children[0]).startswith(before)
                and isinstance(children[-1], nodes.Text) and str(children[-1]).endswith(after)):
            continue
        if len(children) == 1:
            inner = [_strip_text(children[0], left=len(before), right=len(after))]
        else:
            inner = [_strip_text(children[0], left=len(before)), *children[1:-1],
                     _strip_text(children[-1], right=len(after))]
        inner = [n for n in inner if n is not None]
        number, name = retitle(inner, realtype)
        if number is None and name is inner:
            continue
        if number is not None and not isinstance(block, unenumerable_node):
            # a block the book numbers keeps its number; the paper's joins the name: "Lemma 3 (name, Lemma C.2)"
            number, name = None, retitle(inner, "")[1]
        del title[:]
        if number is not None:
            title += nodes.inline("", number, classes=["proof-number"])
            if block.get("label"):
                found[block["label"]] = (env.docname, f"{realtype.title()} {number}")
        if name and "".join(n.astext() for n in name).strip():
            title += [nodes.Text(before), *name, nodes.Text(after)]


def number_bare_references(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """A ``{prf:ref}`` without text to a block whose title gave it a paper's number prints that number."""
    numbers: dict[str, tuple[str, str]] = getattr(app.env, "lipnb_proof_numbers", {})
    for ref in doctree.findall(nodes.reference):
        target = ref.get("refid") or (ref.get("refuri") or "").partition("#")[2]
        if target in numbers and ref.astext().strip() == numbers[target][1].split(" ")[0]:
            ref.children = []
            ref += nodes.Text(numbers[target][1])


def purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    numbers = getattr(env, "lipnb_proof_numbers", {})
    for label in [k for k, (doc, _) in numbers.items() if doc == docname]:
        del numbers[label]


def merge(app: Sphinx, env: BuildEnvironment, docnames: set[str], other: BuildEnvironment) -> None:
    env.lipnb_proof_numbers = {**getattr(env, "lipnb_proof_numbers", {}),
                               **{k: v for k, v in getattr(other, "lipnb_proof_numbers", {}).items()
                                  if v[0] in docnames}}


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx_proof")
    app.connect("doctree-read", retitle_results)
    app.connect("doctree-resolved", number_bare_references)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    # the titles are rewritten when a document is read: any edit of this file must re-read every document
    version = int(hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:8], 16)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": version}
