"""Bad model names, devices and inputs are refused with a clear error before any work, alike in every family:
seeds that are not plain ASCII numbers below 2**64, devices that hold no values or that torch cannot use here,
tensors on the meta device, inputs narrower than a map's weights, and cost models asked about no tokens."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb import models, self_attention
from lipnb.arguments import check_device
from lipnb.models import llama
from lipnb.models.loading import check_model_name


@pytest.fixture(scope="module")
def maps() -> dict[str, object]:
    """One layer map of each family: BERT (MiniLM), GPT-2 (random) and Llama (random), float32, with its width."""
    bert, gpt2 = models.load_shared("minilm")[0], models.load_shared("gpt2-random")[0]
    return {"bert": models.attention_map(bert, 0), "gpt2": models.attention_map(gpt2, 0),
            "llama": models.attention_map(llama.random_llama(0), 0), "llama-block": models.attention_map(
                llama.random_llama(0), 0, "block")}


WIDTHS = {"bert": 384, "gpt2": 768, "llama": 256, "llama-block": 256}


@given(st.one_of(
    st.integers(2**64, 2**80).map(str),                                   # beyond torch's 64-bit seeds
    st.text(st.characters(categories=["Nd"]), min_size=1, max_size=3)     # any Unicode digit, ASCII included
    .filter(lambda s: not s.isascii() or (len(s) > 1 and s.startswith("0"))),
    st.sampled_from(["", " 1", "1 ", "+1", "-1", "1.0", "1e3", "²", "0x1", "1_000"])))
def test_a_seed_that_is_not_a_plain_number_is_refused(seed: str) -> None:
    with pytest.raises(ValueError, match=r"gpt2-random|seed"):
        check_model_name(f"gpt2-random:{seed}")


@given(st.integers(0, 2**64 - 1))
def test_every_64_bit_seed_is_a_model_name(seed: int) -> None:
    assert check_model_name(f"gpt2-random:{seed}") == f"gpt2-random:{seed}"


@pytest.mark.parametrize("device", ["meta", torch.device("meta"), "xpu", "mtia", "hpu", "cuda:99", "mps",
                                    "vulkan", "nonsense"])
def test_a_device_without_values_or_not_usable_here_is_refused(device: object) -> None:
    """Refused before anything loads: "cuda:99" as a missing GPU here, as a missing ordinal on a GPU machine."""
    with pytest.raises(ValueError, match="device"):
        models.load("gpt2-random", device=device)
    with pytest.raises(ValueError, match="device"):
        check_device(device)


def test_a_usable_device_is_kept() -> None:
    assert check_device("cpu") == torch.device("cpu")
    with pytest.raises(TypeError, match="device"):
        check_device(0)


@pytest.mark.parametrize("family", sorted(WIDTHS))
def test_meta_tensors_are_refused_by_every_map(maps: dict, family: str) -> None:
    X = torch.empty(1, 3, WIDTHS[family], device="meta")
    for call in (maps[family], maps[family].linearize):
        with pytest.raises(ValueError, match="meta"):
            call(X)
    with pytest.raises(ValueError, match="meta"):
        self_attention(torch.empty(1, 3, 2, device="meta"), torch.eye(2), torch.eye(2))


@given(st.sampled_from(sorted(WIDTHS)), st.sampled_from([torch.float16, torch.bfloat16]))
def test_an_input_narrower_than_the_weights_is_refused_alike_in_every_family(maps: dict, family: str,
                                                                              dtype: torch.dtype) -> None:
    X = torch.randn(1, 3, WIDTHS[family]).to(dtype)
    for call in (maps[family], maps[family].linearize):
        with pytest.raises(ValueError, match=f"X is {dtype} but the map's weights are torch.float32"):
            call(X)


def test_a_wider_input_still_runs_a_llama_map(maps: dict) -> None:
    """float64 holds float32 weights exactly: a Llama map runs on it, as the certificate's float64 product needs."""
    X = torch.randn(1, 3, 256, dtype=torch.float64)
    assert maps["llama"](X).dtype == torch.float64


@given(st.sampled_from(sorted(WIDTHS)), st.one_of(st.integers(-10**6, 0), st.floats(1, 10), st.booleans()))
def test_flops_of_no_tokens_or_a_non_count_are_refused(maps: dict, family: str, n: object) -> None:
    f = maps[family]
    flops = f.flops if hasattr(f, "flops") else f.attention.flops
    with pytest.raises((TypeError, ValueError), match="n"):
        flops(n)


@given(st.sampled_from(["bert", "gpt2", "llama"]), st.integers(1, 10**4))
def test_flops_are_positive_and_grow_with_n(maps: dict, family: str, n: int) -> None:
    now, later = maps[family].flops(n), maps[family].flops(n + 1)
    assert all(now[k] > 0 and later[k] > now[k] for k in now)
