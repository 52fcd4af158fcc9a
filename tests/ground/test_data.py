"""The data cache (checksums, offline errors, downloads) and Sec. 5.1's token sequences, all offline."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import socket
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, GPT2Tokenizer, PreTrainedTokenizerBase

from lipnb import data
from lipnb.models.loading import _gpt2_tokenizer_dir, _minilm_dir

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"
ALICE_START = "[Alice's Adventures in Wonderland by Lewis Carroll 1865]"
AG_FIRST = ("Fears for T N pension after talks Unions representing workers at Turner   Newall say they "
            "are 'disappointed' after talks with stricken parent firm Federal Mogul.")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may open a connection: every connect fails at once."""
    def refuse(self: socket.socket, *args: object) -> None:
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def _has_all_files(folder: Path) -> bool:
    return all((folder / spec.path).is_file() for spec in data._FILES.values())


@pytest.fixture
def real_data(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The pre-seeded data ($LIPNB_DATA_DIR, else ../shared/data), checked to be left unwritten."""
    candidates = [Path(p) for p in (os.environ.get(data._DATA_ENV), SHARED) if p]
    folder = next((c.absolute() for c in candidates if _has_all_files(c)), None)
    if folder is None:
        pytest.skip(f"no pre-seeded data: set {data._DATA_ENV} or provide {SHARED}")
    monkeypatch.setenv(data._DATA_ENV, str(folder))
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    yield folder
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before


def _fabricate(folder: Path, name: str, content: bytes, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Write ``content`` as cached file ``name`` and make its checksums the expected ones."""
    spec = data._FILES[name]
    path = folder / spec.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    monkeypatch.setitem(data._FILES, name, dataclasses.replace(
        spec, md5=hashlib.md5(content).hexdigest(), sha256=hashlib.sha256(content).hexdigest()))
    return path


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty LIPNB_DATA_DIR."""
    monkeypatch.setenv(data._DATA_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


# -- the real texts ---------------------------------------------------------------------------


def test_alice_is_nltks_gutenberg_text(real_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nltk
    from nltk.corpus.reader import PlaintextCorpusReader
    from nltk.corpus.util import LazyCorpusLoader

    text = data.alice_text()
    assert text.startswith(ALICE_START) and len(text) == 144_396
    # nltk.corpus.gutenberg's own definition, fresh, with NLTK's data path at the cache
    monkeypatch.setattr(nltk.data, "path", [str(real_data / "nltk_data")])
    gutenberg = LazyCorpusLoader("gutenberg", PlaintextCorpusReader, r"(?!\.).*\.txt", encoding="latin1")
    assert text == gutenberg.raw("carroll-alice.txt")


def test_ag_news_test_split(real_data: Path) -> None:
    texts = data.ag_news_texts()
    assert len(texts) == 7600 and texts[0] == AG_FIRST
    assert all(isinstance(t, str) and t for t in texts)
    with pytest.raises(ValueError, match="split='test'"):
        data.ag_news_texts("train")


def test_fetch_finds_everything_preseeded(real_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert data._fetch() == [real_data / spec.path for spec in data._FILES.values()]
    assert data._main(["fetch"]) == 0
    assert capsys.readouterr().out.count("ok  ") == len(data._FILES)


# -- the cache --------------------------------------------------------------------------------


def test_default_cache_is_under_the_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(data._DATA_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert data._data_dir() == tmp_path / "lipnb"
    monkeypatch.setenv(data._DATA_ENV, "~/somewhere")
    assert data._data_dir() == Path.home() / "somewhere"


def test_fabricated_files_are_read(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fabricate(cache, "alice", b"Alice was beginning to get very tired.\n", monkeypatch)
    csv = b'"3","Title, with comma","Body ""quoted"""\n"1","T2","D2"\n'
    _fabricate(cache, "ag_news", csv, monkeypatch)
    assert data.alice_text() == "Alice was beginning to get very tired.\n"
    assert data.ag_news_texts() == ['Title, with comma Body "quoted"', "T2 D2"]


@pytest.mark.parametrize("which", ["md5", "sha256"])
def test_corrupted_file_is_rejected(cache: Path, monkeypatch: pytest.MonkeyPatch, which: str) -> None:
    path = _fabricate(cache, "alice", b"the real text\n", monkeypatch)
    spec = data._FILES["alice"]
    wrong = hashlib.new(which, b"another text\n").hexdigest()
    monkeypatch.setitem(data._FILES, "alice", dataclasses.replace(spec, **{which: wrong}))
    actual = getattr(spec, which)
    with pytest.raises(ValueError, match=f"{re.escape(str(path))}.*{which} is {actual}, expected {wrong}"):
        data.alice_text()
    with pytest.raises(ValueError, match="corrupt"):
        data._fetch(["alice"])
    assert path.read_bytes() == b"the real text\n"  # reported, not deleted or overwritten


def test_missing_file_offline_names_the_fetch_command(cache: Path) -> None:
    start = time.perf_counter()
    with pytest.raises(FileNotFoundError, match=r"ag_news/test\.csv.*python -m lipnb\.data fetch"):
        data.ag_news_texts()
    assert time.perf_counter() - start < 5
    assert not cache.exists()


def test_hf_hub_offline_means_offline(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("probed the network"))
    assert not data.reachable("https://example.org")
    with pytest.raises(FileNotFoundError):
        data.alice_text()


def test_cli_fetch_offline_fails_cleanly(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert data._main(["fetch"]) == 1
    assert "python -m lipnb.data fetch" in capsys.readouterr().err


def test_download_is_verified_before_it_lands(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = b"Down the Rabbit-Hole\n"
    spec = data._FILES["alice"]
    monkeypatch.setitem(data._FILES, "alice", dataclasses.replace(
        spec, md5=hashlib.md5(good).hexdigest(), sha256=hashlib.sha256(good).hexdigest()))
    monkeypatch.setattr(data, "reachable", lambda url, timeout=2.0: True)
    folder = cache / Path(spec.path).parent

    monkeypatch.setitem(data._DOWNLOADERS, "alice", lambda target: target.write_bytes(b"truncated"))
    with pytest.raises(ValueError, match="md5"):
        data.alice_text()
    assert list(folder.iterdir()) == []  # the bad download was discarded, nothing moved into place

    monkeypatch.setitem(data._DOWNLOADERS, "alice", lambda target: target.write_bytes(good))
    assert data.alice_text() == good.decode()
    assert [p.name for p in folder.iterdir()] == ["carroll-alice.txt"]


def test_url_download_streams_into_place(cache: Path, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    source = tmp_path / "remote.csv"
    source.write_bytes(b'"2","Title","Text"\n')
    spec = data._FILES["ag_news"]
    monkeypatch.setitem(data._FILES, "ag_news", dataclasses.replace(
        spec, url=source.as_uri(), md5=hashlib.md5(source.read_bytes()).hexdigest(),
        sha256=hashlib.sha256(source.read_bytes()).hexdigest()))
    monkeypatch.setattr(data, "reachable", lambda url, timeout=2.0: True)
    assert data.ag_news_texts() == ["Title Text"]
    assert (cache / spec.path).read_bytes() == source.read_bytes()


@pytest.mark.parametrize("unzip", [True, False])
def test_alice_download_through_nltk(cache: Path, monkeypatch: pytest.MonkeyPatch, unzip: bool) -> None:
    import nltk

    text = b"CHAPTER I. Down the Rabbit-Hole\n"

    def fake_download(package: str, download_dir: str, raise_on_error: bool) -> bool:
        corpora = Path(download_dir) / "corpora"
        corpora.mkdir(parents=True)
        with zipfile.ZipFile(corpora / "gutenberg.zip", "w") as archive:
            archive.writestr("gutenberg/carroll-alice.txt", text)
        if unzip:
            (corpora / "gutenberg").mkdir()
            (corpora / "gutenberg" / "carroll-alice.txt").write_bytes(text)
        return True

    spec = data._FILES["alice"]
    monkeypatch.setitem(data._FILES, "alice", dataclasses.replace(
        spec, md5=hashlib.md5(text).hexdigest(), sha256=hashlib.sha256(text).hexdigest()))
    monkeypatch.setattr(data, "reachable", lambda url, timeout=2.0: True)
    monkeypatch.setattr(nltk, "download", fake_download)
    assert data.alice_text() == text.decode()
    assert sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file()) == [spec.path]


# -- token sequences --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> PreTrainedTokenizerBase:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))
        return GPT2Tokenizer.from_pretrained(_gpt2_tokenizer_dir())


@pytest.fixture(scope="module")
def bert_tokenizer() -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(_minilm_dir())


TEXT = " ".join(f"Sentence number {i} of a long story about Alice and the White Rabbit." for i in range(300))


def test_windows_are_consecutive_and_disjoint(gpt2_tokenizer: PreTrainedTokenizerBase) -> None:
    seqs = data.token_sequences(TEXT, gpt2_tokenizer, (5, 2, 7), per_length=3)
    assert list(seqs) == [5, 2, 7]
    for n, s in seqs.items():
        assert s.shape == (3, n) and s.dtype == torch.long
    ids = gpt2_tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert torch.cat([s.flatten() for s in seqs.values()]).tolist() == ids[:3 * (5 + 2 + 7)]


def test_restart_per_length(gpt2_tokenizer: PreTrainedTokenizerBase) -> None:
    seqs = data.token_sequences(TEXT, gpt2_tokenizer, (4, 6), per_length=2, restart_per_length=True)
    ids = gpt2_tokenizer(TEXT, add_special_tokens=False)["input_ids"]
    assert seqs[4].flatten().tolist() == ids[:8] and seqs[6].flatten().tolist() == ids[:12]


def test_restart_only_when_the_text_is_too_short(gpt2_tokenizer: PreTrainedTokenizerBase) -> None:
    """Default: windows disjoint across lengths while they fit, restarting per length when they do not
    (the ``paper`` profile); an explicit ``False`` on too short a text is an error naming the fix."""
    n_ids = len(gpt2_tokenizer(TEXT, add_special_tokens=False)["input_ids"])
    lengths = (n_ids // 4, n_ids // 3)
    seqs = data.token_sequences(TEXT, gpt2_tokenizer, lengths, per_length=2)          # 2 * sum > n_ids
    assert seqs[lengths[0]][0, :5].tolist() == seqs[lengths[1]][0, :5].tolist()
    with pytest.raises(ValueError, match="restart_per_length=True"):
        data.token_sequences(TEXT, gpt2_tokenizer, lengths, per_length=2, restart_per_length=False)
    short = data.token_sequences(TEXT, gpt2_tokenizer, (4, 6), per_length=2)
    assert short[4].flatten().tolist() != short[6].flatten().tolist()[:8]


def test_no_special_tokens_and_no_length_warning(
    bert_tokenizer: PreTrainedTokenizerBase, capfd: pytest.CaptureFixture[str]
) -> None:
    seqs = data.token_sequences(TEXT, bert_tokenizer, (600,), per_length=2)  # > model_max_length 512
    ids = torch.cat(list(seqs.values())).flatten().tolist()
    assert bert_tokenizer.cls_token_id not in ids and bert_tokenizer.sep_token_id not in ids
    assert "sequence length is longer" not in capfd.readouterr().err


def test_running_out_of_text_says_how_many_tokens(gpt2_tokenizer: PreTrainedTokenizerBase) -> None:
    text = "Alice was beginning to get very tired"  # 7 GPT-2 tokens
    with pytest.raises(ValueError, match=r"has 7 tokens but 2 sequences .* need 8"):
        data.token_sequences(text, gpt2_tokenizer, (1, 3), per_length=2, restart_per_length=False)
    with pytest.raises(ValueError, match=r"has 7 tokens but 2 sequences .* need 8"):
        data.token_sequences(text, gpt2_tokenizer, (2, 4), per_length=2)       # too short even restarting
    with pytest.raises(ValueError, match="distinct"):
        data.token_sequences(text, gpt2_tokenizer, (2, 2))
    with pytest.raises(ValueError, match="each of lengths must be >= 1"):
        data.token_sequences(text, gpt2_tokenizer, (0,))


def test_quick_grid_fits_in_alice(real_data: Path, gpt2_tokenizer: PreTrainedTokenizerBase,
                                  bert_tokenizer: PreTrainedTokenizerBase) -> None:
    from lipnb.profiles import PROFILES

    quick, text = PROFILES["quick"], data.alice_text()
    for tokenizer in (gpt2_tokenizer, bert_tokenizer):
        seqs = data.token_sequences(text, tokenizer, quick.lengths, quick.per_length)
        assert {n: tuple(s.shape) for n, s in seqs.items()} == {n: (3, n) for n in quick.lengths}
