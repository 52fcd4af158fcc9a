"""The texts of Sec. 5.1 (*Alice in Wonderland*, AG_NEWS test split) and the token sequences cut from them.

Files live in one cache folder, ``$LIPNB_DATA_DIR`` (default ``$XDG_CACHE_HOME/lipnb`` or
``~/.cache/lipnb``), laid out like the offline mirror ``shared/data``::

    ag_news/test.csv
    nltk_data/corpora/gutenberg/carroll-alice.txt

Every read checks the file's MD5 and SHA-256; a file that fails is reported, never used, never
overwritten. A missing file is downloaded (online) into a temporary file, verified, then moved into
place; offline it is a ``FileNotFoundError`` naming ``python -m lipnb.data fetch``. The cache is
never written except to add a missing file.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import os
import shutil
import socket
import sys
import tempfile
import threading
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import torch
from torch import Tensor

from .arguments import check_bool, check_choice, check_lengths, check_positive_int, check_sequence
from .results import progress_bar, user_cache_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "DATASETS",
    "ag_news_texts",
    "alice_text",
    "dataset_text",
    "dataset_title",
    "on_texts",
    "reachable",
    "token_sequences",
]

_DATA_ENV = "LIPNB_DATA_DIR"
_FETCH_COMMAND = "python -m lipnb.data fetch"
_TRUE = {"1", "on", "yes", "true"}


@dataclass(frozen=True)
class _DataFile:
    """One cached file: its path under :func:`_data_dir`, its checksums, and where it comes from."""

    path: str
    md5: str
    sha256: str
    url: str


_FILES: dict[str, _DataFile] = {
    # The CSV torchtext's AG_NEWS downloads; the MD5 is the one torchtext checks.
    "ag_news": _DataFile(
        path="ag_news/test.csv",
        md5="d52ea96a97a2d943681189a97654912d",
        sha256="521465c2428ed7f02f8d6db6ffdd4b5447c1c701962353eb2c40d548c3c85699",
        url="https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/test.csv",
    ),
    # NLTK's Gutenberg selection, fetched with nltk.download("gutenberg").
    "alice": _DataFile(
        path="nltk_data/corpora/gutenberg/carroll-alice.txt",
        md5="71f666b608285153d85a961a40bb8c19",
        sha256="84157c64cf991c7cd7f3fc39aa8fddefebae13710268f448f6034559db37f884",
        url="https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/corpora/gutenberg.zip",
    ),
}



def _data_dir() -> Path:
    """The data cache: ``$LIPNB_DATA_DIR`` (relative paths resolved from the current directory)."""
    env = os.environ.get(_DATA_ENV)
    return Path(env).expanduser().absolute() if env else user_cache_dir()


def _offline_by_env() -> bool:
    """Whether ``HF_HUB_OFFLINE`` declares this machine offline (then lipnb downloads nothing)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def reachable(url: str, timeout: float = 2.0) -> bool:
    """Whether a TCP connection to ``url``'s host opens within ``timeout`` s (DNS included)."""
    if _offline_by_env():
        return False
    parsed = urlparse(url)
    address = (parsed.hostname or "", parsed.port or 443)
    result: list[bool] = []

    def probe() -> None:
        try:
            with socket.create_connection(address, timeout=timeout):
                result.append(True)
        except Exception:
            result.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return result == [True]


def _verify(content: bytes, spec: _DataFile, path: Path) -> None:
    """Raise ``ValueError`` naming the file and both digests unless ``content`` matches ``spec``."""
    for algorithm, expected in (("md5", spec.md5), ("sha256", spec.sha256)):
        actual = hashlib.new(algorithm, content).hexdigest()
        if actual != expected:
            raise ValueError(
                f"{path} is corrupt or not the expected file: {algorithm} is {actual}, expected "
                f"{expected}. It was not used; delete it and run `{_FETCH_COMMAND}`."
            )


def _download_url(url: str, target: Path) -> None:
    """Stream ``url`` into ``target`` with a progress bar."""
    with urllib.request.urlopen(url, timeout=60) as response, target.open("wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        with progress_bar(total=total, unit="B", unit_scale=True, desc=target.name) as bar:
            while chunk := response.read(1 << 16):
                out.write(chunk)
                bar.update(len(chunk))


def _download_alice(target: Path) -> None:
    """``nltk.download("gutenberg")`` into a temporary folder, then copy ``carroll-alice.txt`` out."""
    import nltk

    with tempfile.TemporaryDirectory() as tmp:
        nltk.download("gutenberg", download_dir=tmp, raise_on_error=True)
        corpora = Path(tmp) / "corpora"
        unzipped = corpora / "gutenberg" / "carroll-alice.txt"
        if unzipped.is_file():
            shutil.copyfile(unzipped, target)
        else:
            with zipfile.ZipFile(corpora / "gutenberg.zip") as archive:
                target.write_bytes(archive.read("gutenberg/carroll-alice.txt"))


_DOWNLOADERS: dict[str, Callable[[Path], None]] = {
    "ag_news": lambda target: _download_url(_FILES["ag_news"].url, target),
    "alice": _download_alice,
}


def _download(name: str, path: Path) -> None:
    """Download file ``name`` to a temporary file beside ``path``, verify it, then move it there."""
    spec = _FILES[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _DOWNLOADERS[name](tmp)
        _verify(tmp.read_bytes(), spec, tmp)
        tmp.chmod(0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _data_path(name: str) -> Path:
    """Path of cached file ``name`` (a key of ``_FILES``), downloaded first if missing and online."""
    check_choice(name, "name (a data file)", tuple(_FILES))
    spec = _FILES[name]
    path = _data_dir() / spec.path
    if not path.is_file():
        if not reachable(spec.url):
            raise FileNotFoundError(
                f"{path} is missing and this machine is offline. On a machine with internet run "
                f"`{_FETCH_COMMAND}` (with {_DATA_ENV} set to the same folder), or point {_DATA_ENV} "
                "at a folder that holds it (e.g. the shared/data mirror)."
            )
        _download(name, path)
    return path


def _read_verified(name: str) -> bytes:
    """The bytes of cached file ``name``, checked against its checksums (read once, then hashed)."""
    path = _data_path(name)
    content = path.read_bytes()
    _verify(content, _FILES[name], path)
    return content


def alice_text() -> str:
    """*Alice's Adventures in Wonderland*, exactly ``nltk.corpus.gutenberg.raw("carroll-alice.txt")``."""
    # NLTK's Gutenberg reader decodes latin-1; reading the verified bytes ourselves avoids
    # nltk.corpus.gutenberg's lazy loader, which keeps the first folder it ever found.
    return _read_verified("alice").decode("latin-1")


def ag_news_texts(split: str = "test") -> list[str]:
    """The 7,600 AG_NEWS test articles as torchtext yields them: ``title + " " + description``."""
    if split != "test":
        raise ValueError(f"only split='test' is cached (the paper's texts); got {split!r}")
    rows = csv.reader(io.StringIO(_read_verified("ag_news").decode("utf-8")))
    return [" ".join(row[1:]) for row in rows]


DATASETS = ("alice", "ag_news")


def dataset_text(dataset: str) -> str:
    """Sec. 5.1's texts: *Alice in Wonderland*, or the first 1000 AG_NEWS test articles joined by spaces."""
    if dataset == "alice":
        return alice_text()
    if dataset == "ag_news":
        return " ".join(ag_news_texts()[:1000])
    raise ValueError(f"dataset must be one of {DATASETS}; got {dataset!r}")


def dataset_title(dataset: str, markdown: bool = False, *, figure: bool = False) -> str:
    """Sec. 5.1's texts named for a reader: "Alice" or "AG News"; a book's title in italics with ``markdown``
    ("*Alice*", for a table or a check's claim) or ``figure`` (matplotlib's maths, for a legend)."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}; got {dataset!r}")
    markdown, figure = check_bool(markdown, "markdown"), check_bool(figure, "figure")
    if markdown and figure:
        raise ValueError("dataset_title: italics for Markdown or for a figure, not both")
    alice = "*Alice*" if markdown else r"$\mathit{Alice}$" if figure else "Alice"
    return {"alice": alice, "ag_news": "AG News"}[dataset]


def on_texts(phrases: Mapping[str, str]) -> str:
    """One phrase per text, said once when every text agrees: "rises on both texts", or "rises on Alice and
    falls on AG News" (the texts in the order given)."""
    if not isinstance(phrases, Mapping) or not phrases:
        raise TypeError("on_texts: phrases is a non-empty mapping from a text to its phrase")
    for dataset, phrase in phrases.items():
        check_choice(dataset, "text", DATASETS)
        if not isinstance(phrase, str):
            raise TypeError(f"on_texts: the phrase for {dataset!r} is not text")
    if len(phrases) == 2 and len(set(phrases.values())) == 1:
        return f"{next(iter(phrases.values()))} on both texts"
    return " and ".join(f"{phrase} on {dataset_title(dataset)}" for dataset, phrase in phrases.items())


def _fetch(names: Iterable[str] | None = None) -> list[Path]:
    """Make sure the named files (default: all of ``_FILES``) are cached and verified; return paths."""
    paths = []
    for name in _FILES if names is None else check_sequence(names, "names", allow_empty=True):
        path = _data_path(name)
        _verify(path.read_bytes(), _FILES[name], path)
        paths.append(path)
    return paths


def _tokenize(text: str, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """Token ids of the whole text, no special tokens, no too-long-for-the-model warning."""
    return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


def token_sequences(
    text: str,
    tokenizer: PreTrainedTokenizerBase,
    lengths: Sequence[int],
    per_length: int = 10,
    *,
    restart_per_length: bool | None = None,
) -> dict[int, Tensor]:
    """Sec. 5.1's inputs: for each ``n``, ``per_length`` disjoint runs of ``n`` consecutive tokens.

    The text is tokenized once; windows are cut one after the other, length by length, so no two
    share a token. With ``restart_per_length`` each length starts again at the first token, and
    windows are disjoint only within a length: the ``paper`` profile (10 runs of every even length
    up to 512) needs that, since disjoint windows would take 657,920 tokens. ``None`` (default)
    restarts only when the text is too short for windows disjoint across lengths. Returns
    ``{n: LongTensor (per_length, n)}``; ``ValueError`` says how many tokens were needed and
    available when the text runs out.
    """
    per_length = check_positive_int(per_length, "per_length")
    lengths = tuple(check_lengths(lengths))
    if not isinstance(text, str):
        raise TypeError(f"text must be a string; got {type(text).__name__}")
    if not text:
        raise ValueError("text is empty")
    if not callable(tokenizer):
        raise TypeError(f"tokenizer must be a tokenizer (callable); got {type(tokenizer).__name__}")
    if restart_per_length is not None:
        restart_per_length = check_bool(restart_per_length, "restart_per_length")
    ids = _tokenize(text, tokenizer)
    if restart_per_length is None:
        restart_per_length = per_length * sum(lengths) > len(ids)
    needed = per_length * (max(lengths) if restart_per_length else sum(lengths))
    if needed > len(ids):
        hint = "" if restart_per_length else (
            f"; restart_per_length=True needs per_length * max(lengths) = {per_length * max(lengths)}"
        )
        raise ValueError(f"the text has {len(ids)} tokens but {per_length} sequences of each length "
                         f"in {lengths} need {needed}{hint}")
    sequences, start = {}, 0
    for n in lengths:
        start = 0 if restart_per_length else start
        sequences[n] = torch.tensor(ids[start:start + per_length * n]).view(per_length, n)
        start += per_length * n
    return sequences


def _main(argv: Sequence[str] | None = None) -> int:
    """``python -m lipnb.data fetch``: download and verify every file into ``$LIPNB_DATA_DIR``."""
    parser = argparse.ArgumentParser(prog="python -m lipnb.data", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["fetch"], help="download and verify the cached files")
    parser.parse_args(argv)
    try:
        for path in _fetch():
            print(f"ok  {path}")
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
