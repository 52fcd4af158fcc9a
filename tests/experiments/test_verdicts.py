"""The verdict words and how they are decided; the one table of published numbers and the settings read from it."""

from __future__ import annotations

import re

import pytest
import torch

from lipnb.experiments import verdicts
from lipnb.paper import paper_numbers
from lipnb.paper.paper_settings import (
    ADVERSARIAL_RANDOM_GPT2,
    REAL_DATA_RANDOM_GPT2,
    random_gpt2_adversarial_panel,
    random_gpt2_real_data_panel,
)
from lipnb.paper.published import SCRIPT_SETTINGS


def test_the_six_verdict_words_each_have_a_meaning() -> None:
    assert list(verdicts.VERDICTS) == ["reproduced", "differs", "holds trivially", "by construction", "a setting",
                                     "not comparable offline"]
    assert all(meaning for meaning in verdicts.VERDICTS.values())


def test_interval_and_bound_verdicts() -> None:
    assert verdicts.interval_verdict(0.5, 0.48, 0.51) == "reproduced"
    assert verdicts.interval_verdict(0.25, 0.239, 0.248) == "differs"   # close, but outside the interval
    assert verdicts.bound_verdict(0.5, 0.248) == "holds trivially"
    assert verdicts.bound_verdict(0.5, 0.52) == "differs"
    with pytest.raises(ValueError, match="low"):
        verdicts.interval_verdict(0.5, 0.6, 0.4)


def test_drawn_constant_recovers_an_exact_power_law_and_its_verdict_needs_the_shape() -> None:
    n = torch.arange(2, 100, 5, dtype=torch.float64)
    C, low, high = verdicts.drawn_constant(n, 0.92 * n**0.5, 0.5)
    assert C == pytest.approx(0.92, rel=1e-12) and low == pytest.approx(0.92, rel=1e-9) and high >= C
    noisy = 0.92 * n**0.5 * (1 + 0.01 * torch.sin(n))
    assert verdicts.drawn_verdict(0.92, 0.5, n, noisy, (0.49, 0.51)) == "reproduced"
    # Points that grow like n^0.29 do not follow a drawn √n, whatever their constant's spread.
    slow = 0.92 * n**0.29
    assert verdicts.drawn_verdict(0.92, 0.5, n, slow, (0.28, 0.30)) == "differs"
    with pytest.raises(ValueError, match="positive"):
        verdicts.drawn_constant(n, -slow, 0.5)


def test_count_verdicts_lists_every_word_and_refuses_others() -> None:
    counts = verdicts.count_verdicts(["reproduced", "a setting", "a setting"])
    assert counts["reproduced"] == 1 and counts["a setting"] == 2 and counts["differs"] == 0
    assert list(counts) == list(verdicts.VERDICTS)
    with pytest.raises(ValueError, match="unknown verdict"):
        verdicts.count_verdicts(["reproduced, as published and corrected"])


def test_published_numbers_have_unique_keys_roles_and_sources() -> None:
    keys = [p.key for p in paper_numbers.PUBLISHED]
    assert len(keys) == len(set(keys))
    for p in paper_numbers.PUBLISHED:
        assert p.role in ("claim", "drawn curve", "setting")
        assert (p.exponent is not None) == (p.role == "drawn curve")
        # A paper section, appendix or figure, or a script path with its line.
        assert re.search(r"Sec\. \d|App\. [C-E]|\.py:\d+", p.source), p.source
    assert paper_numbers.number("drawn-adv-random-gpt2").shown() == "$0.92\\,n^{0.5}$"
    assert paper_numbers.number("c5-factor").shown() == "100 to 1,000"
    assert paper_numbers.number("ag-news-articles").shown() == "1,000"
    assert paper_numbers._number(1e-4) == "$10^{-4}$" and paper_numbers._number(0.05) == "0.05"


def test_published_numbers_say_where_they_are_printed_in_words() -> None:
    cited = {p.key: p.cited() for p in paper_numbers.PUBLISHED}
    assert cited["drawn-real-random-gpt2"] == "the random-GPT-2 plotting script, lines 62 and 129"
    assert cited["adv-lengths"] == "the adversarial-input script, lines 29, 68 and 80"
    assert cited["plot-cut-random-gpt2"] == "the random-GPT-2 plotting script, lines 51–53"
    assert cited["radius-bert-encoder"] == "Sec. 5.2; the adversarial-input script, line 28"
    assert not any(".py" in c or "/" in c for c in cited.values())   # no file name reaches the page
    # The settings the paper states beside its experiments are in the table, with their sources.
    settings = {p.key: p.value for p in paper_numbers.PUBLISHED if p.role == "setting"}
    assert (settings["adv-layer-gpt2"], settings["adv-head-gpt2"], settings["adv-R-gpt2"]) == (0.0, 0.0, 10.0)
    assert (settings["model-layers"], settings["model-heads"], settings["model-d"]) == (12.0, 12.0, 768.0)
    assert settings["c5-extracts"] == 5.0 and settings["ag-news-articles"] == 1000.0
    assert paper_numbers.number("c5-factor").source.startswith("Sec. 3.2")
    assert paper_numbers.PUBLISHED_NUMBERS is paper_numbers.PUBLISHED


def test_published_number_lookup_refuses_bad_keys() -> None:
    with pytest.raises(TypeError, match="key"):
        paper_numbers.number(3)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="no published number"):
        paper_numbers.number("the answer")
    with pytest.raises(TypeError, match="grid"):
        paper_numbers.value("adv-lengths")


def test_settings_read_from_the_table_are_the_scripts() -> None:
    assert SCRIPT_SETTINGS["gpt2_random/compute_gpt_random.py"] == (1e-3, 1000)
    assert SCRIPT_SETTINGS["gpt_2/compute_gpt.py"] == (5e-4, 500)
    assert SCRIPT_SETTINGS["adversarial_data/toolbox.py"] == (1e-4, 100)
    assert len(SCRIPT_SETTINGS) == 5
    adv = ADVERSARIAL_RANDOM_GPT2
    assert (adv.seed, adv.layer, adv.head, adv.R, adv.drawn_C) == (320, 6, 0, 100.0, 0.92)
    assert adv.lengths == tuple(range(2, 100, 5))
    assert REAL_DATA_RANDOM_GPT2.lengths == tuple(range(2, 100, 2)) and REAL_DATA_RANDOM_GPT2.per_length == 10
    assert paper_numbers.value("radius-random-gpt2") == 27.7


def test_paper_panels_refuse_bad_arguments_before_any_work() -> None:
    with pytest.raises(ValueError, match="corrected"):
        random_gpt2_adversarial_panel("estimator")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="corrected"):
        random_gpt2_adversarial_panel(["dropout"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="lengths"):
        random_gpt2_real_data_panel([])
    with pytest.raises(TypeError, match="lengths"):
        random_gpt2_real_data_panel([4.5])  # type: ignore[list-item]


PLANTED_CHAPTER = '''# A chapter

```{admonition} Correction: Theorem 4.4 needs Hardy's factor 2; the bound of Theorem 3.5 fails
text
```

:::{admonition} Correction of the published code: the BERT-decoder adversarial panel differentiates the cache
:::

```{admonition} Sharpening: the two-Dirac constant is $(1+\\gamma R^2)e^{\\gamma R^2}/2$
```

```{admonition} Correction of Kim et al.: the Lambert-W term is W₀((N−1)/e)
```

```{admonition} Correction: Kim et al.'s 2-norm bound needs ‖W^{Q,h}‖₂ squared
```

```{admonition} Sharpening: Kim et al.'s 2-norm bound holds with 2√2 in place of 4
```

```{admonition} A note, not a correction
```
'''


def test_correction_boxes_are_found_and_classified_by_kind_on_planted_text() -> None:
    titles = verdicts.correction_titles(PLANTED_CHAPTER)
    assert len(titles) == 6 and titles[0].startswith("Correction: Theorem 4.4")
    found = [verdicts.classify_correction(t) for t in titles]
    assert [c.kind for c in found] == ["statement", "code", "sharpening", "statement", "statement", "sharpening"]
    assert [c.whose for c in found] == ["Castin et al.", "Castin et al.'s code", "Castin et al.", "Kim et al.",
                                        "Kim et al.", "Kim et al."]
    assert found[0].weight == "substantive" and found[3].weight == "minor" and found[2].weight == ""
    assert verdicts.correction_subject(titles[2]).startswith("the two-Dirac constant")


def test_a_box_that_cannot_be_classified_fails_loudly() -> None:
    # A sharpening titled as a correction of a statement, and a defect of the code titled as one of a statement.
    with pytest.raises(ValueError, match=r"titled as a correction of a statement.*retitle it 'Sharpening:'"):
        verdicts.classify_correction("Correction: the two-Dirac constant is larger")
    with pytest.raises(ValueError, match="retitle it 'Correction of the published code:'"):
        verdicts.classify_correction("Correction: the BERT-decoder adversarial panel differentiates the cache")
    # A correction the registry does not know, one that matches two phrases, and an unknown opening.
    with pytest.raises(ValueError, match="contains none of"):
        verdicts.classify_correction("Correction: Lemma 9.9 is wrong")
    with pytest.raises(ValueError, match="contains 2 of"):
        verdicts.classify_correction("Correction: the Lambert-W term and the 2-norm bound needs both")
    with pytest.raises(ValueError, match="opens with none of"):
        verdicts.classify_correction("Corrections to Theorem 4.4")
    with pytest.raises(TypeError):
        verdicts.classify_correction(4.4)  # type: ignore[arg-type]


def test_every_registered_correction_has_one_phrase_and_whose_statement_it_corrects() -> None:
    phrases = [c.phrase for c in verdicts.BOOK_CORRECTIONS]
    assert len(phrases) == len(set(phrases))
    assert all(sum(p in q for q in phrases) == 1 for p in phrases)   # no phrase inside another
    for c in verdicts.BOOK_CORRECTIONS:
        assert c.kind in verdicts.CORRECTION_KINDS
        assert (c.weight in ("substantive", "minor")) == (c.kind == "statement")
        assert bool(c.about) == (c.kind != "code")
