"""Every number Castin, Ablin & Peyré (2024) print in Sec. 5 and App. C-E, and every constant their published scripts
type in (``vcastin/how-smooth-is-attention``), each with its source line: the one table of published numbers.

A number's ``role`` says what it is: a ``"claim"`` (a rate or value the paper states as a finding), a
``"drawn curve"`` (the constant of a curve ``C n^α`` a plotting script draws over measured points), or a
``"setting"`` (a choice made by the experiment: a seed, layer, radius, grid or stopping rule). Other modules
read their settings from here (:data:`lipnb.paper.published.SCRIPT_SETTINGS`, :mod:`lipnb.paper.paper_settings`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["PUBLISHED", "PUBLISHED_NUMBERS", "PublishedNumber", "Role", "number", "value"]

Role = Literal["claim", "drawn curve", "setting"]

# The published scripts in words, for the reading text (where a number is typed in, in which script).
_SCRIPTS: dict[str, str] = {
    "adversarial_data/adversarial.py": "the adversarial-input script",
    "adversarial_data/toolbox.py": "the adversarial toolbox",
    "gpt2_random/process_gpt_random.py": "the random-GPT-2 data script",
    "gpt2_random/compute_gpt_random.py": "the random-GPT-2 estimator script",
    "gpt2_random/plot_gpt_random.py": "the random-GPT-2 plotting script",
    "bert_encoder/process_bert_encoder.py": "the BERT-encoder data script",
    "bert_encoder/compute_bert_encoder.py": "the BERT-encoder estimator script",
    "bert_encoder/plot_bert_encoder.py": "the BERT-encoder plotting script",
    "bert_decoder/process_bert_decoder.py": "the BERT-decoder data script",
    "bert_decoder/compute_bert_decoder.py": "the BERT-decoder estimator script",
    "bert_decoder/plot_bert_decoder.py": "the BERT-decoder plotting script",
    "gpt_2/compute_gpt.py": "the pretrained-GPT-2 estimator script",
    "gpt_2/plot_gpt.py": "the pretrained-GPT-2 plotting script",
}
_SCRIPT_LINES = re.compile(r"([\w/]+\.py):(\d+(?:-\d+)?)((?:, :\d+(?:-\d+)?)*)")


def _lines_in_words(match: re.Match[str]) -> str:
    lines = [match.group(2), *re.findall(r":(\d+(?:-\d+)?)", match.group(3))]
    lines = [span.replace("-", "–") for span in lines]  # a range of lines takes an en dash: 51–53
    words = " and ".join([", ".join(lines[:-1]), lines[-1]] if len(lines) > 1 else lines)
    return f"{_SCRIPTS[match.group(1)]}, line{'s' if len(lines) > 1 or '–' in lines[0] else ''} {words}"


def _number(v: float) -> str:
    """``v`` as ``:g`` writes it, but a whole number of four or more digits in full with commas (1,000, 8,192) and
    a small power of ten as one ($10^{-4}$, as the prose writes it)."""
    if float(v).is_integer() and abs(v) >= 1000:
        return format(int(v), ",")
    exponent = math.log10(v) if 0 < v < 1e-2 else None
    if exponent is not None and abs(exponent - round(exponent)) < 1e-9:
        return f"$10^{{{round(exponent)}}}$"
    return f"{v:g}"


@dataclass(frozen=True)
class PublishedNumber:
    """One published number: its key, what it is, its value, where it is printed, its role and the model it needs.

    ``value`` is a float, or a tuple for a range (``(low, high)``) or a grid of lengths; ``exponent`` is the
    exponent of a drawn curve ``value · n^exponent``.
    """

    key: str
    what: str
    value: float | tuple[float, ...]
    source: str
    role: Role
    model: str = ""
    exponent: float | None = None

    def shown(self) -> str:
        """The number as the paper or script writes it, a whole number of four or more digits with its thousands
        separated ("1,000"), a drawn curve as the formula ``$0.92\\,n^{0.5}$``."""
        v = self.value
        if self.exponent is not None:
            return f"${v:g}\\,n^{{{self.exponent:g}}}$"
        if isinstance(v, tuple):
            if len(v) == 2:
                return f"{_number(v[0])} to {_number(v[1])}"
            return f"{_number(v[0])}, {_number(v[1])}, …, {_number(v[-1])}"
        return _number(v)

    def cited(self) -> str:
        """Where the number is printed, in words: the paper's section, or the published script and line
        ("Sec. 5.2; the adversarial-input script, line 28")."""
        return _SCRIPT_LINES.sub(_lines_in_words, self.source)


_BERT, _GPT2, _RANDOM = "bert-base-uncased", "gpt2", "gpt2-random"
_ADV, _RND, _GPT = "adversarial_data/adversarial.py", "gpt2_random/", "gpt_2/"
_P = PublishedNumber
PUBLISHED: tuple[PublishedNumber, ...] = (
    # Sec. 5.3: "the observed growth rate is close to n^{1/4}, which is smaller than the worst-case rate n^{1/2}".
    _P("real-exponent-random-gpt2", "real-data exponent, random GPT-2 (layer 6, Alice)", 0.25, "Sec. 5.3", "claim",
       _RANDOM),
    _P("real-below-half-random-gpt2", "real-data exponent below the worst case 1/2, random GPT-2", 0.5, "Sec. 5.3",
       "claim", _RANDOM),
    _P("real-exponent-bert-encoder", "real-data exponent, BERT encoder", 0.25, "Sec. 5.3", "claim", _BERT),
    _P("real-exponent-bert-decoder", "real-data exponent, BERT decoder", 0.25, "Sec. 5.3", "claim", _BERT),
    # The curves the plotting scripts draw over the real-data points (constants typed in, not fitted).
    _P("drawn-real-random-gpt2", "real-data curve drawn over random GPT-2, layer 6 (Alice and AG News)", 0.445,
       _RND + "plot_gpt_random.py:62, :129", "drawn curve", _RANDOM, 0.25),
    _P("drawn-real-bert-encoder", "real-data curve drawn over the BERT encoder, layer 0 (Alice)", 14.3,
       "bert_encoder/plot_bert_encoder.py:58", "drawn curve", _BERT, 0.24),
    _P("drawn-real-bert-decoder", "real-data curve drawn over the BERT decoder, layer 6 (Alice)", 6.44,
       "bert_decoder/plot_bert_decoder.py:55", "drawn curve", _BERT, 0.25),
    _P("drawn-real-gpt2-0", "real-data curve drawn over pretrained GPT-2, layer 0 (Alice, App. E.2)", 35.3,
       _GPT + "plot_gpt.py:21-22", "drawn curve", _GPT2, 0.26),
    _P("drawn-real-gpt2-6", "real-data curve drawn over pretrained GPT-2, layer 6 (Alice, App. E.2)", 25.0,
       _GPT + "plot_gpt.py:21-22", "drawn curve", _GPT2, 0.51),
    # Sec. 5.2: Lemma C.7's input "leads, for n large enough, to a growth rate of n^{1/2}" (Figure 1).
    _P("adv-exponent-random-gpt2", "adversarial exponent, random GPT-2 (layer 6, head 0)", 0.5, "Sec. 5.2, Fig. 1",
       "claim", _RANDOM),
    _P("adv-exponent-bert-encoder", "adversarial exponent, BERT encoder (layer 0, head 0)", 0.5, "Sec. 5.2, Fig. 1",
       "claim", _BERT),
    _P("adv-exponent-bert-decoder", "adversarial exponent, BERT decoder (layer 6, head 7)", 0.5, "Sec. 5.2, Fig. 1",
       "claim", _BERT),
    _P("drawn-adv-random-gpt2", "adversarial curve drawn over random GPT-2", 0.92, _ADV + ":89", "drawn curve",
       _RANDOM, 0.5),
    _P("drawn-adv-bert-encoder", "adversarial curve drawn over the BERT encoder", 4.39, _ADV + ":43", "drawn curve",
       _BERT, 0.5),
    _P("drawn-adv-bert-decoder", "adversarial curve drawn over the BERT decoder", 5.73, _ADV + ":43", "drawn curve",
       _BERT, 0.5),
    _P("drawn-adv-gpt2", "adversarial curve drawn over pretrained GPT-2 (App. E.2)", 46.9, _ADV + ":103",
       "drawn curve", _GPT2, 0.5),
    # Sec. 5.2: the radius of the adversarial inputs and the magnitude of real tokens.
    _P("radius-bert-encoder", "mean token radius of real data, BERT encoder (the panel's R)", 15.5,
       "Sec. 5.2; " + _ADV + ":28", "claim", _BERT),
    _P("radius-bert-decoder", "mean token radius of real data, BERT decoder (the panel's R)", 21.5,
       "Sec. 5.2; " + _ADV + ":28", "claim", _BERT),
    _P("radius-random-gpt2", "token radius of real data, random GPT-2", 27.7, "Sec. 5.2", "claim", _RANDOM),
    # Sec. 3.2: the factor 2γR² of Proposition 3.4's regime n - 1 <= e^{2γR²} is "of the order of 10² to 10³" for
    # real data and pretrained GPT-2 and BERT; App. C.5 (Figure 2) plots it over BERT's heads.
    _P("c5-factor", "2γR² over the heads of pretrained GPT-2 and BERT (App. C.5's Fig. 2 plots BERT's)",
       (100.0, 1000.0), "Sec. 3.2; App. C.5, Fig. 2", "claim", _BERT),
    _P("c5-extracts", "text extracts of Alice behind App. C.5's Fig. 2 (BERT)", 5.0, "App. C.5", "setting", _BERT),
    # Settings of the adversarial panels (adversarial_data/adversarial.py).
    _P("adv-R-random-gpt2", "R of the random-GPT-2 adversarial panel", 100.0, "Sec. 5.2; " + _ADV + ":67", "setting",
       _RANDOM),
    _P("adv-R-gpt2", "R of the pretrained-GPT-2 adversarial panel", 10.0, _ADV + ":79", "setting", _GPT2),
    _P("adv-layer-gpt2", "layer of the pretrained-GPT-2 adversarial panel", 0.0, _ADV + ":78", "setting", _GPT2),
    _P("adv-head-gpt2", "head of the pretrained-GPT-2 adversarial panel", 0.0, _ADV + ":82", "setting", _GPT2),
    _P("adv-layer-bert-encoder", "layer of the BERT-encoder adversarial panel", 0.0, _ADV + ":27", "setting",
       _BERT),
    _P("adv-head-bert-encoder", "head of the BERT-encoder adversarial panel", 0.0, _ADV + ":31", "setting", _BERT),
    _P("adv-layer-bert-decoder", "layer of the BERT-decoder adversarial panel", 6.0, _ADV + ":27", "setting",
       _BERT),
    _P("adv-head-bert-decoder", "head of the BERT-decoder adversarial panel", 7.0, _ADV + ":31", "setting", _BERT),
    _P("adv-seed-random-gpt2", "seed of the random GPT-2 of the adversarial panel", 320.0, _ADV + ":60", "setting",
       _RANDOM),
    _P("adv-layer-random-gpt2", "layer of the random-GPT-2 adversarial panel", 6.0, _ADV + ":66", "setting", _RANDOM),
    _P("adv-head-random-gpt2", "head of the random-GPT-2 adversarial panel", 0.0, _ADV + ":70", "setting", _RANDOM),
    _P("adv-lengths", "lengths of every adversarial panel", tuple(float(n) for n in range(2, 100, 5)),
       _ADV + ":29, :68, :80", "setting"),
    _P("adv-seed-bert", "seed drawn before the BERT adversarial panels", 457.0, _ADV + ":24", "setting", _BERT),
    # Settings of the real-data runs (process_*.py, compute_*.py, plot_*.py).
    _P("real-seed-random-gpt2", "seed of the random GPT-2 of the real-data runs", 0.0,
       _RND + "process_gpt_random.py:11", "setting", _RANDOM),
    _P("real-layer-random-gpt2", "layer of the random-GPT-2 real-data runs", 6.0, _RND + "process_gpt_random.py:26",
       "setting", _RANDOM),
    _P("real-lengths", "real-data lengths (every model on Alice; all but the BERT encoder on AG News)",
       tuple(float(n) for n in range(2, 100, 2)), "Sec. 5.1; " + _RND + "process_gpt_random.py:58, :101",
       "setting"),
    _P("real-lengths-bert-encoder-ag-news", "real-data lengths of the BERT encoder on AG News",
       tuple(float(n) for n in range(2, 512, 10)), "bert_encoder/process_bert_encoder.py:58", "setting", _BERT),
    _P("real-per-length", "sequences per length (real data)", 10.0, "Sec. 5.1; " + _RND + "process_gpt_random.py:104",
       "setting"),
    _P("ag-news-articles", "AG News test articles joined into one text, the first ones in the file", 1000.0,
       _RND + "process_gpt_random.py:41, :43", "setting"),
    # Sec. 5: "Both models have 12 multi-head attention layers, and 12 attention heads per layer, with an embedding
    # dimension d = 768" (BERT-base and GPT-2 small).
    _P("model-layers", "attention layers of BERT and GPT-2", 12.0, "Sec. 5", "setting"),
    _P("model-heads", "heads per attention layer of BERT and GPT-2", 12.0, "Sec. 5", "setting"),
    _P("model-d", "embedding dimension d of BERT and GPT-2", 768.0, "Sec. 5", "setting"),
    _P("plot-cut-random-gpt2", "random-GPT-2 real-data plot: points at or below this value are not drawn", 0.1,
       _RND + "plot_gpt_random.py:51-53", "setting", _RANDOM),
    # The stopping rule of each script's loc_lipschitz (threshold on successive quotients, iteration cap).
    _P("threshold:bert_encoder/compute_bert_encoder.py", "estimator threshold, BERT encoder", 1e-4,
       "bert_encoder/compute_bert_encoder.py:14", "setting", _BERT),
    _P("max_iter:bert_encoder/compute_bert_encoder.py", "estimator iteration cap, BERT encoder", 100.0,
       "bert_encoder/compute_bert_encoder.py:14", "setting", _BERT),
    _P("threshold:bert_decoder/compute_bert_decoder.py", "estimator threshold, BERT decoder", 1e-4,
       "bert_decoder/compute_bert_decoder.py:14", "setting", _BERT),
    _P("max_iter:bert_decoder/compute_bert_decoder.py", "estimator iteration cap, BERT decoder", 100.0,
       "bert_decoder/compute_bert_decoder.py:14", "setting", _BERT),
    _P("threshold:gpt2_random/compute_gpt_random.py", "estimator threshold, random GPT-2 real data", 1e-3,
       _RND + "compute_gpt_random.py:12", "setting", _RANDOM),
    _P("max_iter:gpt2_random/compute_gpt_random.py", "estimator iteration cap, random GPT-2 real data", 1000.0,
       _RND + "compute_gpt_random.py:12", "setting", _RANDOM),
    _P("threshold:gpt_2/compute_gpt.py", "estimator threshold, pretrained GPT-2", 5e-4, _GPT + "compute_gpt.py:12",
       "setting", _GPT2),
    _P("max_iter:gpt_2/compute_gpt.py", "estimator iteration cap, pretrained GPT-2", 500.0,
       _GPT + "compute_gpt.py:12", "setting", _GPT2),
    _P("threshold:adversarial_data/toolbox.py", "estimator threshold, adversarial panels", 1e-4,
       "adversarial_data/toolbox.py:5", "setting"),
    _P("max_iter:adversarial_data/toolbox.py", "estimator iteration cap, adversarial panels", 100.0,
       "adversarial_data/toolbox.py:5", "setting"),
)

# The same table under a name that the floor can publish (its own ``PUBLISHED`` names what the floor publishes).
PUBLISHED_NUMBERS = PUBLISHED

_BY_KEY = {n.key: n for n in PUBLISHED}
if len(_BY_KEY) != len(PUBLISHED):
    raise RuntimeError("paper_numbers: two published numbers share a key")


def number(key: str) -> PublishedNumber:
    """The published number named ``key`` (a ``KeyError`` listing none of the others if unknown)."""
    if not isinstance(key, str):
        raise TypeError(f"key must be a str; got {type(key).__name__}")
    if key not in _BY_KEY:
        raise KeyError(f"no published number named {key!r}")
    return _BY_KEY[key]


def value(key: str) -> float:
    """The value of the published number ``key`` (a float; ranges and grids: use :func:`number`)."""
    v = number(key).value
    if isinstance(v, tuple):
        raise TypeError(f"{key!r} is a range or a grid; read number({key!r}).value")
    return v
