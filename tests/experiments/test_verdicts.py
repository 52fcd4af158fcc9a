"""The verdict words and how they are decided; the one table of published numbers and the settings read from it."""

from __future__ import annotations

import re

import pytest
import torch

from lipnb.experiments import verdicts
from lipnb.experiments.real_text import PAPER
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
    assert paper_numbers.number("drawn-adv-random-gpt2").shown() == "0.92·n^0.5"
    assert paper_numbers.number("c5-factor-bert").shown() == "100 to 1000"


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
    assert PAPER["token radius, random GPT-2"] == 27.7


def test_paper_panels_refuse_bad_arguments_before_any_work() -> None:
    with pytest.raises(ValueError, match="corrected"):
        random_gpt2_adversarial_panel("estimator")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="corrected"):
        random_gpt2_adversarial_panel(["dropout"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="lengths"):
        random_gpt2_real_data_panel([])
    with pytest.raises(TypeError, match="lengths"):
        random_gpt2_real_data_panel([4.5])  # type: ignore[list-item]
