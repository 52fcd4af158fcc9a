"""Each model as a reader names it."""

from __future__ import annotations

import pytest

from lipnb import models


def test_every_model_has_a_readers_name() -> None:
    """Tables and legends name models in words: every id has a title that is not an id, seeds are spelled out."""
    titles = {name: models.model_title(name) for name in models.MODEL_NAMES}
    assert len(set(titles.values())) == len(titles) and not set(titles.values()) & set(models.MODEL_NAMES)
    assert models.model_title("gpt2-random:7") == "random GPT-2, seed 7"
    with pytest.raises(ValueError, match="unknown model"):
        models.model_title("minilm-2")
