"""Every published number of Sec. 5 beside ours: the numbers, their models and computed verdicts.

``PUBLISHED`` lists the paper's numbers (its text and its published scripts), each with the model it needs;
:func:`verdict` words whether our data support a published number, as published and once corrected.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CORRECTION_TARGETS", "PUBLISHED", "PublishedNumber", "verdict"]


@dataclass(frozen=True)
class PublishedNumber:
    """One number the paper publishes: what it is, its value, where it is printed, the model it needs."""

    quantity: str
    value: float
    source: str
    model: str


_BERT = "bert-base-uncased"
PUBLISHED: tuple[PublishedNumber, ...] = (
    PublishedNumber("real-data exponent, random GPT-2 (Alice, layer 6)", 0.25, "Sec. 5.3", "gpt2-random"),
    PublishedNumber("real-data exponent below the worst case, random GPT-2", 0.5, "Sec. 5.3", "gpt2-random"),
    PublishedNumber("real-data exponent, BERT encoder", 0.25, "Sec. 5.3", _BERT),
    PublishedNumber("real-data exponent, BERT decoder", 0.25, "Sec. 5.3", _BERT),
    PublishedNumber("drawn real-data curve, BERT encoder: constant", 14.3, "plot_bert_encoder.py:58", _BERT),
    PublishedNumber("drawn real-data curve, BERT encoder: exponent", 0.24, "plot_bert_encoder.py:58", _BERT),
    PublishedNumber("adversarial exponent, random GPT-2 (layer 6, head 0)", 0.5, "Sec. 5.2-5.3", "gpt2-random"),
    PublishedNumber("adversarial C of the drawn C√n, random GPT-2", 0.92, "adversarial.py:89", "gpt2-random"),
    PublishedNumber("adversarial R, random GPT-2", 100.0, "adversarial.py:67", "gpt2-random"),
    PublishedNumber("token radius of real data, random GPT-2", 27.7, "Sec. 5.2", "gpt2-random"),
    PublishedNumber("adversarial exponent, BERT encoder (layer 0, head 0)", 0.5, "Sec. 5.2-5.3", _BERT),
    PublishedNumber("adversarial exponent, BERT decoder (layer 6, head 7)", 0.5, "Sec. 5.2-5.3", _BERT),
    PublishedNumber("adversarial C of the drawn C√n, BERT encoder", 4.39, "adversarial.py:43", _BERT),
    PublishedNumber("adversarial C of the drawn C√n, BERT decoder", 5.73, "adversarial.py:43", _BERT),
    PublishedNumber("adversarial R = mean real token radius, BERT encoder", 15.5, "Sec. 5.2", _BERT),
    PublishedNumber("adversarial R = mean real token radius, BERT decoder", 21.5, "Sec. 5.2", _BERT),
    PublishedNumber("adversarial C of the drawn C√n, pretrained GPT-2", 46.9, "adversarial.py:103", "gpt2"),
)

# Whose error each correction of the book corrects, by the start of its admonition title (after "Correction").
CORRECTION_TARGETS: dict[str, str] = {
    "Lemma 3.1 needs a convex set": "paper",
    "Theorem 3.3 holds with": "paper",
    "Lemma C.5 gives the local constant": "paper",
    "the two-Dirac constant is": "paper",
    "Theorem 3.5 holds with the exponent": "paper",
    "Theorem 4.4 needs Hardy's factor 2": "paper",
    "the published constants are not": "published code",
    "the random-GPT-2 real-data points": "published code",
    "the published random-GPT-2 adversarial inputs": "published code",
    "the BERT-decoder adversarial panel": "published code",
    "the \"masked BERT\" panels": "published code",
    "the factor 2 in App. C.5": "the book itself (chapter 4's earlier head labels)",
    "the Lambert-W term": "Kim et al.'s paper",
    "the 2-norm bound needs": "Kim et al.'s paper",
}


def verdict(as_published: bool, once_corrected: bool) -> str:
    """The verdict on a published number from whether our data support it as published and once corrected."""
    if as_published and once_corrected:
        return "reproduced, as published and corrected"
    if as_published:
        return "reproduced as published; differs once the code is corrected"
    if once_corrected:
        return "differs as published; holds once the code is corrected"
    return "differs, as published and corrected"
