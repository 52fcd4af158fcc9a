"""The recorded runs refuse bad requests before any work, with one clear line: long-context records and requests
(checked before SmolLM2 loads), character language models (sizes, texts, record names, ids) and both command lines
(argparse's exit status 2, no traceback)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lipnb.experiments import charlm, charlm_runs, ngram
from lipnb.experiments import long_context as lc


class Loaded(Exception):
    """Raised where SmolLM2 (or the corpus) would load: a check that comes later is too late."""


def _loaded(*_: object, **__: object) -> None:
    raise Loaded


@pytest.fixture
def no_loading(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """SmolLM2, the AG_NEWS corpus and every cache entry out of reach: work raises :class:`Loaded`."""
    monkeypatch.setattr(lc.models, "load_shared", _loaded)
    monkeypatch.setattr(charlm_runs, "agnews_corpus", _loaded)
    monkeypatch.setenv("LIPNB_CACHE_DIR", str(tmp_path))


def _refused_in_one_line(main: object, argv: list[str], capsys: pytest.CaptureFixture[str], words: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err and words in err.strip().splitlines()[-1], err


@pytest.mark.parametrize("record", [{}, {"rows": []}, {"heads": []}, [], None, "smollm2-long"])
def test_an_empty_or_foreign_record_is_refused_not_replaced(record: object) -> None:
    if record is None:
        assert len(lc.long_context_layers(None)) > 0          # None: the shipped record, by design
        return
    with pytest.raises((TypeError, ValueError), match=r"record|rows"):
        lc.long_context_layers(record)
    with pytest.raises((TypeError, ValueError), match=r"first|rows"):
        lc.agreement(record, lc.long_context_record())


def test_records_that_share_no_input_do_not_agree() -> None:
    row = {"text": "alice", "n": 512, "window": 0, "layer": 3, "lip": 2.0, "error": 1e-4}
    with pytest.raises(ValueError, match="share no input"):
        lc.agreement({"rows": [row]}, {"rows": [{**row, "n": 1024}]})


@given(st.one_of(
    st.fixed_dictionaries({"text": st.sampled_from(["nope", "", 3, None])}),
    st.fixed_dictionaries({"n": st.sampled_from([1, 0, 2.0, "512", 2 * lc._DEEPEST]), "layers": st.just([0])}),
    st.just({"n": 300}),                                   # off the grid, with no layers given
    st.fixed_dictionaries({"layers": st.sampled_from([[30], [-1], "0", [0.5], [True], 7, []])}),
    st.fixed_dictionaries({"windows": st.sampled_from([0, -1, 1.5, "2", True])}),
    st.fixed_dictionaries({"heads": st.sampled_from(["yes", 1, 0])}),
    st.fixed_dictionaries({"log": st.sampled_from(["yes", 1, None])})))
def test_a_bad_request_is_refused_before_smollm2_loads(bad: dict) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lc.models, "load_shared", _loaded)
        args = {"text": "alice", "n": 512, **bad}
        with pytest.raises((TypeError, ValueError)):
            lc._measure_text(args.pop("text"), args.pop("n"), **args)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: lc.sink_terms([1]), "lengths"), (lambda: lc.sink_terms("512"), "lengths"),
    (lambda: lc.sink_terms(text="nope"), "text"), (lambda: lc.rounding_sensitivity(draws=-1), "draws"),
    (lambda: lc.rounding_sensitivity(draws=1.5), "draws"), (lambda: lc.rounding_sensitivity([512, 512]), "lengths"),
    (lambda: lc.rounding_sensitivity(text=None), "text")])
def test_sweeps_of_smollm2_check_first(no_loading: None, call: object, name: str) -> None:
    with pytest.raises((TypeError, ValueError), match=name):
        call()


def test_good_requests_reach_the_model(no_loading: None) -> None:
    for call in (lambda: lc._measure_text("alice", 512), lambda: lc.sink_terms([512]),
                 lambda: lc.rounding_sensitivity([512], draws=0)):
        with pytest.raises(Loaded):
            call()


@pytest.mark.parametrize(("argv", "words"), [
    (["--text", "alice", "--threads", "0"], "--threads: must be >= 1"),
    (["--text", "alice", "--threads", "two"], "--threads: 'two' is not a whole number"),
    (["--text", "alice", "--lengths", "300", "--record", "{tmp}/new.json"], "n must be one of"),
    (["--text", "alice", "--layers", "31", "--lengths", "512", "--record", "{tmp}/new.json"], "layers"),
    (["--text", "alice", "--rounding", "--record", "{tmp}/missing.json"], "does not exist"),
    (["--text", "alice", "--record", "{tmp}"], "is a folder"),
    (["--text", "alice", "--record", "{tmp}/garbage.json"], "is not a JSON record"),
    (["--text", "alice", "--record", "{tmp}/list.json"], "must be a record"),
    (["--text", "alice", "--record", "{tmp}/other.json"], "has no 'rows'")])
def test_the_long_context_command_line_refuses_in_one_line(no_loading: None, tmp_path, capsys, argv: list[str],
                                                          words: str) -> None:
    (tmp_path / "garbage.json").write_text("not json {")
    (tmp_path / "list.json").write_text("[]")
    (tmp_path / "other.json").write_text(json.dumps({"runs": []}))
    _refused_in_one_line(lc._main, [a.replace("{tmp}", str(tmp_path)) for a in argv], capsys, words)


@given(st.sampled_from(["d", "heads", "depth", "context", "batch", "steps"]),
       st.sampled_from([0, -1, 2.5, "4", True, None]))
def test_a_character_model_size_that_is_not_a_positive_int_is_refused(field: str, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match=field):
        charlm.CharLMConfig(**{field: value})


@pytest.mark.parametrize("changes", [{"d": 30, "heads": 4}, {"lr": 0.0}, {"lr": math.nan}, {"lr": "1e-3"},
                                     {"seed": -1}, {"seed": 2**64}])
def test_other_character_model_settings_are_checked(changes: dict) -> None:
    with pytest.raises((TypeError, ValueError), match="|".join(changes)):
        charlm.CharLMConfig(**changes)


@given(st.integers(1, 40), st.integers(1, 60))
def test_a_text_shorter_than_the_context_is_refused_before_training(context: int, length: int) -> None:
    ids = torch.arange(length) % 5
    config = charlm.CharLMConfig(d=8, heads=2, depth=1, context=context, batch=2, steps=1)
    if length >= context + 2:
        rows = charlm.train_char_lm(ids, ids, 5, config, "dot", log_every=1)
        assert rows[-1]["step"] == 1 and math.isfinite(rows[-1]["valid_bpc"])
    else:
        with pytest.raises(ValueError, match=r"train|valid"):
            charlm.train_char_lm(ids, ids, 5, config, "dot", log_every=1)


@pytest.mark.parametrize(("change", "name"), [({"log_every": 0}, "log_every"), ({"divisors": "no"}, "divisors"),
                                              ({"device": "meta"}, "device"), ({"kind": "l1"}, "kind")])
def test_train_char_lm_checks_its_other_arguments(change: dict, name: str) -> None:
    ids = torch.arange(40) % 5
    args = {"kind": "dot", **change}
    with pytest.raises((TypeError, ValueError), match=name):
        charlm.train_char_lm(ids, ids, 5, charlm.CharLMConfig(d=8, context=4, steps=1), args.pop("kind"), **args)


@given(st.text(max_size=12).filter(lambda name: name not in charlm_runs.CHARLM_RECORDS))
def test_an_unknown_record_name_is_refused_never_used_as_a_path(name: str) -> None:
    for call in (charlm_runs.charlm_kinds, charlm_runs.charlm_seeds, charlm_runs._record_path,
                 charlm_runs.charlm_record):
        with pytest.raises(ValueError, match="name must be one of"):
            call(name)


@pytest.mark.parametrize(("args", "name"), [(("l1", 1, 10), "kind"), (("l2-contractive", 16, 10), "kind"),
                                            (("dot", 1, 0), "steps"), (("dot", 3, 10), "depth")])
def test_replay_checks_before_reading_the_corpus(no_loading: None, args: tuple, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        charlm_runs.replay_charlm(*args)


@given(st.lists(st.integers(-5, 7), min_size=3, max_size=30), st.integers(1, 3))
def test_the_ngram_scorers_refuse_ids_outside_the_vocabulary(ids: list[int], order: int) -> None:
    vocab, text = 5, torch.tensor(ids)
    good = all(0 <= i < vocab for i in ids)
    for score in (charlm.ngram_bits_per_char, ngram.kneser_ney_bits_per_char):
        if good and len(ids) >= order:
            assert math.isfinite(score(text, text, vocab, order))
        elif not good:
            with pytest.raises(ValueError, match=r"must lie in 0\.\.4"):
                score(text, text, vocab, order)


def test_the_character_model_command_line_refuses_in_one_line(no_loading: None, tmp_path, capsys) -> None:
    (tmp_path / "garbage.json").write_text("{")
    (tmp_path / "other.json").write_text(json.dumps({"rows": []}))
    for argv, words in ((["--drift", "--out", str(tmp_path / "missing.json")], "does not exist"),
                        (["--drift", "--out", str(tmp_path)], "is a folder"),
                        (["--drift", "--out", str(tmp_path / "garbage.json")], "is not a JSON record"),
                        (["--drift", "--out", str(tmp_path / "other.json")], "has no 'runs'"),
                        (["--out", str(tmp_path)], "is a folder"), (["--record", "../x"], "invalid choice")):
        _refused_in_one_line(charlm_runs._main, argv, capsys, words)


def test_the_character_model_help_says_its_whole_first_paragraph(capsys) -> None:
    with pytest.raises(SystemExit):
        charlm_runs._main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "with a fixed Adam learning rate." in text
