"""Every family of public functions refuses a bad argument (a wrong type, a value out of range, an empty
container, a string where a list is meant, a flag that is not a bool) with a ValueError or TypeError naming it,
before any work; and a sweep's table records what it measured. Models are tiny random ones built here (BERT,
GPT-2, Llama) and ``gpt2-random`` / ``llama-random`` where a sweep needs a named model."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, LlamaConfig, LlamaModel

from lipnb import data, models, profiles, results
from lipnb.core import bounds
from lipnb.core.attention import MultiHead
from lipnb.experiments import adversarial, masked, multihead, real_text, stats, synthetic

F64 = torch.float64
VOCAB, POSITIONS, WIDTH, LAYERS, HEADS = 50, 12, 16, 2, 4

not_ints = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.text(max_size=2),
                     st.none(), st.complex_numbers(allow_nan=False, allow_infinity=False))
not_bools = st.one_of(st.integers(-2, 2), st.floats(allow_nan=True), st.text(max_size=3))


class Worked(Exception):
    """Raised where a function would start its work: an argument check that comes later is too late."""


def work(*_: object, **__: object) -> None:
    raise Worked


def refused(call: Callable[[], object], name: str) -> None:
    """``call()`` raises ValueError or TypeError whose message names ``name`` (and does no work)."""
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert name.lower() in str(info.value).lower(), f"{name!r} not named in: {info.value}"


def _tiny(family: str) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if family == "bert":
            model = BertModel(BertConfig(hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                         intermediate_size=32, vocab_size=VOCAB, max_position_embeddings=POSITIONS,
                                         attn_implementation="eager"))
        elif family == "gpt2":
            model = GPT2Model(GPT2Config(n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, vocab_size=VOCAB,
                                         n_positions=POSITIONS, attn_implementation="eager"))
        else:
            model = LlamaModel(LlamaConfig(hidden_size=WIDTH, intermediate_size=32, num_hidden_layers=LAYERS,
                                           num_attention_heads=HEADS, num_key_value_heads=2, vocab_size=VOCAB,
                                           max_position_embeddings=POSITIONS, attn_implementation="eager"))
    return model.eval().requires_grad_(False)


FAMILIES = {name: _tiny(name) for name in ("bert", "gpt2", "llama")}
family_names = st.sampled_from(sorted(FAMILIES))
X = torch.randn(2, 5, WIDTH)


# Models: every family through the same checks.

@pytest.mark.slow
@given(family_names, st.one_of(not_ints, st.integers(-3, -1), st.integers(LAYERS, 50)))
def test_a_bad_layer_is_refused_in_every_family(family: str, layer: object) -> None:
    model = FAMILIES[family]
    refused(lambda: models.attention_map(model, layer), "layer")
    refused(lambda: models.head_A(model, layer, 0), "layer")
    refused(lambda: models.attention_inputs(model, layer, torch.ones(1, 3, dtype=torch.long)), "layer")


@given(family_names, st.sampled_from(["mha", "self", "block"]),
       st.one_of(st.integers(-3, 50), not_ints).filter(lambda head: head is not None))
def test_head_is_refused_for_a_whole_layer(family: str, kind: str, head: object) -> None:
    refused(lambda: models.attention_map(FAMILIES[family], 0, kind, head=head), "head")


@given(family_names, st.one_of(not_ints, st.integers(-3, -1), st.integers(HEADS, 50)).filter(lambda h: h is not None))
def test_a_bad_head_is_refused_in_every_family(family: str, head: object) -> None:
    model = FAMILIES[family]
    refused(lambda: models.attention_map(model, 0, "head", head=head), "head")
    refused(lambda: models.head_A(model, 0, head), "head")


@given(family_names, st.sampled_from(models.KINDS), not_bools)
def test_masked_must_be_a_bool(family: str, kind: str, masked: object) -> None:
    refused(lambda: models.attention_map(FAMILIES[family], 0, kind, masked=masked), "masked")


@pytest.mark.parametrize(("family", "kind", "masked"), [("bert", "block", True), ("bert", "self", True),
                                                        ("gpt2", "self", False), ("gpt2", "block", False),
                                                        ("llama", "mha", False), ("llama", "head", False)])
def test_a_masking_the_map_cannot_honour_is_refused(family: str, kind: str, masked: bool) -> None:
    refused(lambda: models.attention_map(FAMILIES[family], 0, kind, masked=masked), "masked")


@given(family_names, st.sampled_from(models.KINDS), st.integers(1, 40).filter(lambda d: d != WIDTH))
def test_a_wrong_width_is_refused_before_any_product(family: str, kind: str, d: int) -> None:
    f = models.attention_map(FAMILIES[family], 1, kind)
    refused(lambda: f(torch.randn(1, 3, d)), "X")


@given(family_names, st.one_of(st.text(max_size=3), st.integers(), st.none(), st.lists(st.just("mha"), max_size=2)))
def test_a_bad_kind_is_refused(family: str, kind: object) -> None:
    refused(lambda: models.attention_map(FAMILIES[family], 0, kind), "kind")


@given(family_names, st.lists(st.lists(st.integers(-3, VOCAB + 3), min_size=1, max_size=POSITIONS + 2),
                              min_size=1, max_size=2).filter(lambda rows: len({len(r) for r in rows}) == 1))
def test_token_ids_are_checked_against_the_vocabulary_and_positions(family: str, rows: list[list[int]]) -> None:
    model, ids = FAMILIES[family], torch.tensor(rows)
    if ids.min() < 0 or ids.max() >= VOCAB or ids.shape[1] > POSITIONS:
        refused(lambda: models.attention_inputs(model, 0, ids), "input_ids")
    else:
        assert models.attention_inputs(model, [1, 0], ids)[1].shape == (*ids.shape, WIDTH)


@given(family_names, st.sampled_from([torch.ones(1, 3), torch.ones(1, 3, dtype=torch.bool), "1 2", [[1, 2]],
                                      torch.ones(3, dtype=torch.long), torch.ones(1, 0, dtype=torch.long)]))
def test_token_ids_of_the_wrong_kind_are_refused(family: str, ids: object) -> None:
    refused(lambda: models.attention_inputs(FAMILIES[family], 0, ids), "input_ids")


@given(family_names, st.one_of(st.just([]), st.just("01"), st.lists(not_ints, min_size=1, max_size=2)))
def test_a_bad_list_of_layers_is_refused(family: str, layers: object) -> None:
    refused(lambda: models.attention_inputs(FAMILIES[family], layers, torch.ones(1, 3, dtype=torch.long)), "layer")


@given(st.one_of(st.text(max_size=6).filter(lambda s: s not in models.MODEL_NAMES and ":" not in s), st.integers(),
                st.none()), st.one_of(st.none(), st.just("cpu")))
def test_a_bad_model_name_is_refused_before_loading(name: object, device: object) -> None:
    refused(lambda: models.load(name, device), "model")


@pytest.mark.parametrize("device", ["tpu", 3.5, "cuda:x"])
def test_a_bad_device_is_refused(device: object) -> None:
    refused(lambda: models.load("llama-random", device), "device")


# Sweeps: refused before any work (nothing loaded, nothing measured).

@contextmanager
def no_work() -> Iterator[None]:
    """Loading a model or measuring a map raises :class:`Worked`; the cache is an empty folder."""
    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as folder:
        mp.setenv(results._CACHE_ENV, folder)
        mp.setattr(models, "load_shared", work)
        mp.setattr(real_text, "measure", work)
        yield


bad_lengths = st.one_of(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=3),   # 4.0 too: ints only
    st.lists(st.integers(-3, 0), min_size=1, max_size=3), st.just([]), st.just([True]), st.just("48"),
    st.just(4), st.just([4, 4]), st.just([4.0]))
SWEEPS: dict[str, Callable[..., object]] = {
    "real_text_sweep": lambda **k: real_text.real_text_sweep(**{"model_name": "llama-random", "dataset": "alice",
                                                               "lengths": [4], "per_length": 1, **k}),
    "layer_radii": lambda **k: real_text.layer_radii(**{"model_name": "llama-random", "dataset": "alice",
                                                       "lengths": [4], "per_length": 1, **k}),
    "head_gamma_table": lambda **k: adversarial.head_gamma_table(**{"model_name": "llama-random", "lengths": [4],
                                                                   "per_length": 1, **k}),
    "adversarial_sweep": lambda **k: adversarial.adversarial_sweep(**{"model_name": "llama-random", "layer": 0,
                                                                     "lengths": [4], "R": 1.0, **k}),
    "synthetic_bound_sweep": lambda **k: synthetic.synthetic_bound_sweep(**{"d": 2, "seed": 0, "R": 1.0,
                                                                           "lengths": [4], "per_length": 1, **k}),
}


@given(st.sampled_from(sorted(SWEEPS)), bad_lengths)
def test_every_sweep_refuses_a_bad_grid_of_lengths(sweep: str, lengths: object) -> None:
    with no_work():
        refused(lambda: SWEEPS[sweep](lengths=lengths), "lengths")


@given(st.sampled_from(["real_text_sweep", "layer_radii", "head_gamma_table", "synthetic_bound_sweep"]),
       st.one_of(not_ints, st.integers(-3, 0)))
def test_every_sweep_refuses_a_bad_count(sweep: str, per_length: object) -> None:
    with no_work():
        refused(lambda: SWEEPS[sweep](per_length=per_length), "per_length")


@pytest.mark.parametrize(("sweep", "kwargs", "name"), [
    ("real_text_sweep", {"layers": []}, "layers"),
    ("real_text_sweep", {"layers": "01"}, "layers"),
    ("real_text_sweep", {"layers": 0}, "layers"),
    ("real_text_sweep", {"layers": [1.5]}, "layers"),
    ("real_text_sweep", {"kind": "h"}, "kind"),
    ("real_text_sweep", {"kind": ["mha"]}, "kind"),
    ("real_text_sweep", {"masked": "yes"}, "masked"),
    ("real_text_sweep", {"masked": 0}, "masked"),
    ("real_text_sweep", {"head": 3}, "head"),
    ("real_text_sweep", {"kind": "block", "head": 0}, "head"),
    ("real_text_sweep", {"kind": "head", "head": 1.5}, "head"),
    ("real_text_sweep", {"estimator": "power"}, "estimator"),
    ("real_text_sweep", {"bounds": "yes"}, "bounds"),
    ("real_text_sweep", {"kind": "self", "bounds": True}, "bounds"),
    ("real_text_sweep", {"dataset": "alic"}, "dataset"),
    ("real_text_sweep", {"dataset": ["alice"]}, "dataset"),
    ("real_text_sweep", {"model_name": "gpt-2"}, "model"),
    ("real_text_sweep", {"model_name": None}, "model"),
    ("layer_radii", {"dataset": "x"}, "dataset"),
    ("adversarial_sweep", {"kinds": "head"}, "kinds"),
    ("adversarial_sweep", {"kinds": ()}, "kinds"),
    ("adversarial_sweep", {"kinds": ("mha", "mha")}, "kinds"),
    ("adversarial_sweep", {"heads": []}, "heads"),
    ("adversarial_sweep", {"heads": 0}, "heads"),
    ("adversarial_sweep", {"layer": True}, "layer"),
    ("adversarial_sweep", {"R": -1.0}, "R"),
    ("adversarial_sweep", {"R": "1"}, "R"),
    ("adversarial_sweep", {"lengths": [1, 4]}, "lengths"),
    ("adversarial_sweep", {"A_source": "x"}, "A_source"),
    ("adversarial_sweep", {"estimator": "x"}, "estimator"),
    ("synthetic_bound_sweep", {"d": 2.5}, "d"),
    ("synthetic_bound_sweep", {"seed": 1.5}, "seed"),
    ("synthetic_bound_sweep", {"R": float("nan")}, "R"),
])
def test_a_sweep_refuses_a_bad_setting_before_any_work(sweep: str, kwargs: dict, name: str) -> None:
    with no_work():
        refused(lambda: SWEEPS[sweep](**kwargs), name)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"layers": [4]}, "layer"),                      # llama-random has 4 layers
    ({"kind": "head", "head": 8}, "head"),           # and 8 heads
    ({"lengths": [2000]}, "lengths"),                # and 1024 positions
    ({"masked": False}, "masked"),                   # and is causal
    ({"kind": "block", "masked": False}, "masked"),
])
def test_a_sweep_checks_the_model_once_loaded_before_measuring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               kwargs: dict, name: str) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(real_text, "measure", work)
    refused(lambda: SWEEPS["real_text_sweep"](**kwargs), name)


def test_a_cache_folder_that_cannot_be_written_is_named_before_the_sweep(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path / "file" / "cache"))
    monkeypatch.setattr(models, "load_shared", work)
    refused(lambda: SWEEPS["real_text_sweep"](), "LIPNB_CACHE_DIR")
    refused(lambda: results.cached_table("t", {}, work), "LIPNB_CACHE_DIR")


# What a sweep records is what it measured.

def test_the_table_records_the_masking_and_the_head_measured(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    block = real_text.real_text_sweep("llama-random", "alice", [4], 1, layers=[0], kind="block").frame
    assert block.masked.tolist() == [True] and "head" not in block
    explicit = real_text.real_text_sweep("llama-random", "alice", [4], 1, layers=[0], kind="block", masked=True)
    assert explicit.frame.lip.tolist() == block.lip.tolist() and explicit.frame.masked.tolist() == [True]
    head = real_text.real_text_sweep("llama-random", "alice", [4], 1, layers=[0], kind="head", head=2).frame
    model, _ = models.load_shared("llama-random")
    alone = models.attention_map(model, 0, "head", head=2)
    ids = data.token_sequences(data.dataset_text("alice"), models.load_shared("llama-random")[1], [4], 1)[4]
    X = models.attention_inputs(model, 0, ids, "head")
    assert head["head"].tolist() == [2] and head.masked.tolist() == [True]
    recorded = torch.tensor(head.lip.to_numpy())
    torch.testing.assert_close(recorded, real_text.measure(alone, X, "lanczos"))
    other = real_text.measure(models.attention_map(model, 0, "head", head=0), X, "lanczos")
    assert not torch.allclose(recorded, other, rtol=1e-3)


def test_adversarial_sweep_builds_on_each_head_and_measures_the_layer(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    table = adversarial.adversarial_sweep("llama-random", 1, [2, 4], 1.0, heads=[3]).frame
    assert sorted(table.kind.unique()) == ["head", "mha"] and set(table["head"]) == {3}


# The cache, the profiles and the data.

@given(st.one_of(st.just(""), st.just("a/b"), st.just("../x"), st.integers(), st.none()))
def test_cached_table_refuses_a_bad_name(name: object) -> None:
    refused(lambda: results.cached_table(name, {}, lambda: {"x": [1.0]}), "name")


def test_cached_table_refuses_bad_params_and_stores_no_empty_table(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    refused(lambda: results.cached_table("t", [("a", 1)], lambda: {"x": [1.0]}), "params")
    refused(lambda: results.cached_table("t", {}, None), "compute")
    refused(lambda: results.cached_table("t", {"a": 1}, lambda: {"x": []}), "empty")
    assert not list(tmp_path.glob("t-*"))
    refused(lambda: results.ResultTable.from_columns({"x": "abc"}, {}), "x")


@given(st.one_of(st.text(max_size=6).filter(lambda s: s not in profiles.PROFILES), st.integers(), st.none()))
def test_an_unknown_profile_is_refused(name: object) -> None:
    refused(lambda: profiles.set_profile(name), "profile")


@pytest.mark.parametrize("p", ["quick", None, {"name": "quick"}])
def test_a_profile_argument_must_be_a_profile(p: object) -> None:
    for build in (real_text.real_text_table, adversarial.adversarial_table, adversarial.adversarial_layers):
        refused(lambda build=build: build(p), "Profile")


def test_the_cache_key_does_not_depend_on_the_selected_profile(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    monkeypatch.setenv(results._CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(profiles, "_selected", None)
    calls = []
    for name in ("paper", "quick"):
        monkeypatch.setenv(profiles._ENV_VAR, name)
        results.cached_table("profile_free", {"a": 1}, lambda: calls.append(1) or {"x": [1.0]})
    assert calls == [1] and len(list(tmp_path.glob("profile_free-*.csv"))) == 1


@given(bad_lengths)
def test_token_sequences_refuses_a_bad_grid(lengths: object) -> None:
    refused(lambda: data.token_sequences("some text here", len, lengths, 1), "lengths")


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"text": None}, "text"), ({"text": ""}, "text"), ({"tokenizer": None}, "tokenizer"),
    ({"restart_per_length": "yes"}, "restart_per_length"), ({"restart_per_length": 1}, "restart_per_length"),
])
def test_token_sequences_refuses_bad_inputs(kwargs: dict, name: str) -> None:
    args = {"text": "some text", "tokenizer": len, "lengths": [2], "per_length": 1, **kwargs}
    refused(lambda: data.token_sequences(**args), name)


@given(st.one_of(st.text(max_size=6).filter(lambda s: s not in data.DATASETS), st.none(), st.just(["alice"])))
def test_data_names_are_checked(name: object) -> None:
    refused(lambda: data.dataset_text(name), "dataset")
    refused(lambda: data.dataset_title(name), "dataset")
    refused(lambda: data._data_path(name), "name")


def test_a_text_is_named_for_a_reader() -> None:
    assert [data.dataset_title(d) for d in data.DATASETS] == ["Alice", "AG News"]
    assert [data.dataset_title(d, markdown=True) for d in data.DATASETS] == ["*Alice*", "AG News"]
    assert [data.dataset_title(d, figure=True) for d in data.DATASETS] == [r"$\mathit{Alice}$", "AG News"]


def test_a_text_is_set_in_italics_one_way_at_a_time() -> None:
    refused(lambda: data.dataset_title("alice", markdown=True, figure=True), "not both")
    refused(lambda: data.dataset_title("alice", figure=1), "figure")


def test_fetch_refuses_a_string_for_a_list() -> None:
    refused(lambda: data._fetch("alice"), "names")


# Bounds and statistics.

@given(not_bools)
def test_bounds_refuse_a_flag_that_is_not_a_bool(masked: object) -> None:
    Xb, A = torch.randn(1, 4, 3, dtype=F64), torch.eye(3, dtype=F64)
    refused(lambda: bounds.theorem_c_3(Xb, A, A, masked=masked), "masked")
    refused(lambda: bounds.argmax_counts(Xb, A, masked=masked), "masked")
    heads = MultiHead(A[None], A[None], A[None])
    refused(lambda: bounds.multihead_data_bound(Xb, heads, masked=masked), "masked")


@pytest.mark.parametrize("heads", [None, torch.eye(3), "heads"])
def test_multihead_bounds_refuse_what_is_not_a_layer(heads: object) -> None:
    refused(lambda: bounds.multihead_bound(heads, 1.0, 4), "heads")
    refused(lambda: bounds.multihead_data_bound(torch.randn(1, 4, 3, dtype=F64), heads), "heads")


@given(st.one_of(st.just([1.0, 2.0]), st.just([1, 0]), st.just(torch.tensor([[1.0, 2.0]])), st.just([]),
                 st.just("1 2"), st.just([-1.0, 2.0])))
def test_synthetic_grids_of_radii_are_checked(radii: object) -> None:
    Xs, A = torch.randn(1, 3, 2, dtype=F64), torch.eye(2, dtype=F64)
    if isinstance(radii, list) and radii and min(radii) >= 0:
        assert len(synthetic.large_radius_sweep(Xs, A, A, radii)) == len(radii)
    else:
        refused(lambda: synthetic.large_radius_sweep(Xs, A, A, radii), "radii")


@given(st.one_of(st.just("model"), st.just([]), st.just(["nope"]), st.just(5)))
def test_growth_fits_refuses_a_bad_grouping(by: object) -> None:
    frame = pd.DataFrame({"model": ["a"] * 3, "n": [2, 4, 8], "lip": [1.0, 2.0, 4.0]})
    refused(lambda: stats.growth_fits(frame, by), "by" if not isinstance(by, list) or not by else "nope")


def test_statistics_refuse_bad_inputs() -> None:
    empty = stats.growth_fits(pd.DataFrame({"model": [], "n": [], "lip": []}), ["model"])   # empty in, empty out
    assert empty.empty and list(empty.columns[:4]) == ["model", "alpha", "low", "high"]
    refused(lambda: stats.growth_fits(None, ["model"]), "table")
    refused(lambda: stats.fit_line(["a", "b"], ["c", "d"]), "x")
    x = torch.tensor([1.0, 2.0, 3.0])
    refused(lambda: stats.bootstrap_slope(x, x, resamples=1.5), "resamples")
    refused(lambda: stats.power_law_break(range(1, 10), range(1, 10), min_side=0), "min_side")


def test_a_pandas_column_of_a_group_is_read_as_points() -> None:
    """A group's column keeps its rows' labels (not 0..k); its values are read, in order."""
    from lipnb.arguments import as_points

    frame = pd.DataFrame({"n": [1, 2, 3, 4], "g": [0, 1, 0, 1]})
    group = frame[frame.g == 1]["n"]
    assert as_points(group, "n").tolist() == [2.0, 4.0]


@pytest.mark.parametrize("sweep", ["masked_growth", "masked_mean_field", "bias_ascent"])
@pytest.mark.parametrize("radii", ["1 2", [], [[1.0, 2.0]], torch.tensor([True]), [-1.0], [float("nan")]])
def test_the_masked_and_bias_sweeps_check_their_radii_as_the_synthetic_ones(sweep: str, radii: object) -> None:
    """One check of a grid of radii for every sweep over radii, before any work."""
    A = torch.eye(2, dtype=F64)
    call = {"masked_growth": lambda: masked.masked_growth_sweep(A, radii, [2, 4]),
            "masked_mean_field": lambda: masked.masked_mean_field_sweep(A, A, radii),
            "bias_ascent": lambda: multihead.bias_ascent_sweep(radii)}[sweep]
    refused(call, "radii")


def test_a_phrase_per_text_is_said_once_when_the_texts_agree() -> None:
    assert data.on_texts({"alice": "rises", "ag_news": "rises"}) == "rises on both texts"
    assert data.on_texts({"alice": "rises", "ag_news": "falls"}) == "rises on Alice and falls on AG News"
    assert data.on_texts({"ag_news": "falls"}) == "falls on AG News"
    refused(lambda: data.on_texts({}), "phrases")
    refused(lambda: data.on_texts({"wiki": "rises"}), "text")
    refused(lambda: data.on_texts({"alice": 1}), "phrase")
