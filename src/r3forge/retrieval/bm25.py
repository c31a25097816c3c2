"""BM25 retrieval with `bm25s`: index build from a streamed corpus, save, load, batched search.

    from r3forge.retrieval import BM25Config, BM25Retriever, build_bm25_index
    build_bm25_index("../shared/data/wiki_paragraphs/*.jsonl", "indexes/wiki-bm25", BM25Config())
    retriever = BM25Retriever.load("indexes/wiki-bm25")
    retriever.search(["who founded the band Tinted Windows"], k=10)   # [[("hp123", 17.3), ...]]

Tokenization is ours (`BM25Tokenizer`: lowercase, regex words of 2+ characters, stopwords, PyStemmer
stemming), the same function for passages and queries, so it can be reproduced exactly (e.g. by the
rank-bm25 comparison benchmark). Indexed text is the passage's FlashRAG `contents` (title line + text).
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import bm25s
import datasets
import numpy as np
import Stemmer
from bm25s import stopwords as bm25s_stopwords
from tqdm.auto import tqdm

from r3forge.config import where
from r3forge.data.loaders import PathSpec
from r3forge.errors import ConfigError
from r3forge.retrieval.base import (
    PASSAGES_DIR,
    Fingerprint,
    Hit,
    IndexManifest,
    PassageStore,
    RetrievalError,
    check_request,
    iter_batches,
    open_corpus,
    passage_text,
    read_manifest,
    require_files,
    save_passages,
    staged_output,
    write_manifest,
)

BM25_DIR = "bm25"
BM25_METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
STOPWORDS = {
    "en": bm25s_stopwords.STOPWORDS_EN,
    "en_plus": bm25s_stopwords.STOPWORDS_EN_PLUS,
    "da": bm25s_stopwords.STOPWORDS_DANISH,
    "de": bm25s_stopwords.STOPWORDS_GERMAN,
    "nl": bm25s_stopwords.STOPWORDS_DUTCH,
    "fr": bm25s_stopwords.STOPWORDS_FRENCH,
    "es": bm25s_stopwords.STOPWORDS_SPANISH,
    "pt": bm25s_stopwords.STOPWORDS_PORTUGUESE,
    "it": bm25s_stopwords.STOPWORDS_ITALIAN,
    "ru": bm25s_stopwords.STOPWORDS_RUSSIAN,
    "sv": bm25s_stopwords.STOPWORDS_SWEDISH,
    "no": bm25s_stopwords.STOPWORDS_NORWEGIAN,
    "zh": bm25s_stopwords.STOPWORDS_CHINESE,
    "tr": bm25s_stopwords.STOPWORDS_TURKISH,
    "ko": bm25s_stopwords.STOPWORDS_KOREAN,
}
TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s' and scikit-learn's default: words of 2+ word characters


@dataclass
class BM25Config:
    """How a BM25 index is built (saved in `index.json` and reused for queries)."""

    method: str = field(
        default="lucene",
        metadata={"help": "bm25s scoring variant.", "choices": list(BM25_METHODS)},
    )
    k1: float = field(default=1.5, metadata={"help": "BM25 term-frequency saturation k1."})
    b: float = field(default=0.75, metadata={"help": "BM25 length normalization b."})
    delta: float = field(default=0.5, metadata={"help": "delta of the bm25l and bm25+ variants."})
    stemmer: str = field(
        default="english",
        metadata={"help": "PyStemmer algorithm (english, porter, german, ...) or 'none' for no stemming."},
    )
    stopwords: str = field(
        default="en",
        metadata={"help": f"Stopword list to drop: one of {sorted(STOPWORDS)}, or 'none'."},
    )
    lowercase: bool = field(default=True, metadata={"help": "Lowercase text before tokenizing."})
    token_pattern: str = field(
        default=TOKEN_PATTERN, metadata={"help": "Regex whose matches are the tokens (before stemming)."}
    )

    def __post_init__(self) -> None:
        if self.method not in BM25_METHODS:
            raise RetrievalError(f"BM25Config.method={self.method!r}; choose from {BM25_METHODS}")
        if self.stopwords != "none" and self.stopwords not in STOPWORDS:
            raise RetrievalError(
                f"BM25Config.stopwords={self.stopwords!r}; choose from {sorted(STOPWORDS)} or 'none'"
            )
        if self.stemmer != "none" and self.stemmer not in Stemmer.algorithms():
            raise RetrievalError(
                f"BM25Config.stemmer={self.stemmer!r}; choose 'none' or one of {Stemmer.algorithms()}"
            )


def token_regex(config: BM25Config) -> re.Pattern[str]:
    """`config.token_pattern` compiled; a `ConfigError` naming where it was set (`config.where`) when it is no
    regex, or has more than one group (its matches would be tuples, not tokens).

    >>> token_regex(BM25Config(token_pattern="[a-z]+")).findall("to be")
    ['to', 'be']
    >>> token_regex(BM25Config(token_pattern="("))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    r3forge.errors.ConfigError: default 'token_pattern': not a valid regex '(': missing ), unterminated ...
    """
    try:
        pattern = re.compile(config.token_pattern)
    except re.error as e:
        raise ConfigError(
            f"{where(config, 'token_pattern')}: not a valid regex {config.token_pattern!r}: {e}"
        ) from None
    if pattern.groups > 1:
        raise ConfigError(
            f"{where(config, 'token_pattern')}: {config.token_pattern!r} has {pattern.groups} groups; a token "
            "pattern may have one at most (write the others as (?:...))"
        )
    return pattern


class BM25Tokenizer:
    """text -> list of (stemmed) tokens; thread-safe (one PyStemmer object per thread)."""

    def __init__(self, config: BM25Config):
        self.config = config
        self._split = token_regex(config).findall
        self._stopwords = (
            frozenset(STOPWORDS[config.stopwords]) if config.stopwords != "none" else frozenset()
        )
        self._local = threading.local()

    def _stem(self, words: list[str]) -> list[str]:
        if self.config.stemmer == "none":
            return words
        stemmer = getattr(self._local, "stemmer", None)
        if stemmer is None:
            stemmer = self._local.stemmer = Stemmer.Stemmer(self.config.stemmer)
        return stemmer.stemWords(words)

    def __call__(self, texts: list[str]) -> list[list[str]]:
        out = []
        for text in texts:
            text = text.lower() if self.config.lowercase else text
            out.append(self._stem([w for w in self._split(text) if w not in self._stopwords]))
        return out


def build_bm25_index(
    corpus: PathSpec | datasets.Dataset,
    output: str | os.PathLike[str],
    config: BM25Config | None = None,
    corpus_format: str = "auto",
    overwrite: bool = False,
    batch_size: int = 10_000,
    show_progress: bool = True,
) -> Path:
    """Tokenize `corpus` batch by batch, index it with bm25s and save a self-contained index folder.

    Memory: the token ids of the whole corpus (bm25s needs them at once), never the texts.
    """
    config = config or BM25Config()
    ds, corpus_path = open_corpus(corpus, corpus_format)
    tokenize = BM25Tokenizer(config)
    with staged_output(output, overwrite) as tmp:
        vocab: dict[str, int] = {}
        token_ids: list[list[int]] = []
        fingerprint = Fingerprint()
        bar = tqdm(total=len(ds), desc="Tokenize passages", unit="passage", disable=not show_progress)
        for batch in iter_batches(ds, batch_size):
            fingerprint.update(batch)
            texts = [passage_text(t, x) for t, x in zip(batch["title"], batch["text"], strict=True)]
            for tokens in tokenize(texts):
                token_ids.append([vocab.setdefault(t, len(vocab)) for t in tokens])
            bar.update(len(texts))
        bar.close()
        if not vocab:
            raise RetrievalError(
                f"corpus {corpus_path or '(Dataset)'}: no passage has a single token to index"
            )
        index = bm25s.BM25(method=config.method, k1=config.k1, b=config.b, delta=config.delta)
        index.index((token_ids, vocab), show_progress=show_progress)
        del token_ids
        index.save(str(tmp / BM25_DIR), show_progress=show_progress)
        save_passages(ds, tmp)
        manifest = IndexManifest(
            kind="bm25",
            count=len(ds),
            corpus_path=corpus_path,
            corpus_fingerprint=fingerprint.hexdigest(),
            params=dataclasses.asdict(config),
        )
        write_manifest(tmp, manifest)
    return Path(output)


class BM25Retriever:
    """A loaded BM25 index: `search` (batched, top-k) and `get` (passages by id)."""

    def __init__(self, index: bm25s.BM25, passages: PassageStore, manifest: IndexManifest):
        self.index = index
        self.passages = passages
        self.manifest = manifest
        self.config = BM25Config(**manifest.params)
        self.tokenize = BM25Tokenizer(self.config)

    @classmethod
    def load(cls, folder: str | os.PathLike[str], backend: str = "auto", mmap: bool = False) -> BM25Retriever:
        """Load a saved index. `backend`: "numba" (fast, JIT-compiles a few seconds on first search),
        "numpy", or "auto" (numba when installed). `mmap=True` memory-maps the score arrays."""
        folder = Path(folder)
        manifest = read_manifest(folder, kind="bm25")
        require_files(folder, [PASSAGES_DIR, f"{BM25_DIR}/params.index.json", f"{BM25_DIR}/vocab.index.json"])
        index = bm25s.BM25.load(str(folder / BM25_DIR), mmap=mmap, backend=backend, show_progress=False)
        passages = PassageStore(folder / PASSAGES_DIR)
        if len(passages) != manifest.count or index.scores["num_docs"] != manifest.count:
            raise RetrievalError(
                f"{folder}: manifest count {manifest.count} != {len(passages)} passages / "
                f"{index.scores['num_docs']} indexed documents (mixed-up folder?)"
            )
        return cls(index, passages, manifest)

    def __len__(self) -> int:
        return self.manifest.count

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-k (passage_id, score) per query, best first. Passages sharing no term with a query are
        not returned (a query with no indexed term gets an empty list), as in Lucene/pyserini."""
        check_request(queries, k)
        if not queries:
            return []
        vocab = self.index.vocab_dict
        token_ids = [[vocab[t] for t in tokens if t in vocab] for tokens in self.tokenize(list(queries))]
        nonempty = [i for i, ids in enumerate(token_ids) if ids]
        results: list[list[Hit]] = [[] for _ in queries]
        if not nonempty:
            return results
        k_eff = min(k, len(self))
        rows, scores = self.index.retrieve(  # both (n_nonempty, k_eff)
            [token_ids[i] for i in nonempty], k=k_eff, show_progress=False, n_threads=0
        )
        rows, scores = np.asarray(rows), np.asarray(scores, dtype=np.float64)
        keep = scores != 0.0  # a zero score means the passage shares no query term
        ids = self.passages.ids(rows[keep].tolist())
        pos = 0
        for qi, row_keep, row_scores in zip(nonempty, keep, scores, strict=True):
            n = int(row_keep.sum())
            results[qi] = list(zip(ids[pos : pos + n], row_scores[row_keep].tolist(), strict=True))
            pos += n
        return results

    def get(self, ids: list[str]) -> list[dict[str, str]]:
        return self.passages.get(ids)
