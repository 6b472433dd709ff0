"""The chapter's data: a synthetic bag-of-words corpus whose generating model is known.

Why synthetic. The report trained on its own text corpus, which is not
available here, and no corpus can be downloaded on the lab's machines. A
corpus drawn from a model we wrote down has one advantage a real one lacks:
the best accuracy any classifier can reach on it -- the Bayes-optimal
accuracy -- can be computed, so the trained network has a ceiling to be
measured against instead of only a number.

The model (all of it seeded, so every run sees the same corpus):

* a vocabulary of ``V = 32,754`` words, word ``w`` being the ``w+1``-th most
  frequent; their background frequencies follow a Zipf-Mandelbrot law,
  ``p0(w) ~ 1 / (w + 1 + q)^s`` with ``s = 1.05``, ``q = 2.7`` (the shape
  word counts of real English text have);
* ``K = 4`` topics; topic ``k`` tilts the background law, ``p_k(w) ~ p0(w)
  exp(tau g_kw)`` with ``g_kw`` standard normal, except for the 100 most
  frequent words (function words such as "the", "of"), which every topic
  uses alike;
* a document: its topic drawn uniformly, its length from a log-normal law
  (median 120 words, as a short news item or a forum post), its words drawn
  independently from its topic's law; it is stored as sparse counts.

The network reads ``x_w = log(1 + count_w)`` (a common damping of counts;
being one-to-one, it loses no information).

Bayes-optimal accuracy. Because the length does not depend on the topic, the
posterior of topic ``k`` given a document's counts ``c`` is
``P(k | c) ~ pi_k prod_w p_k(w)^(c_w)``, exactly. The Bayes classifier picks
the topic of largest posterior; its accuracy is the expectation over all
documents of ``max_k P(k | c)``. That expectation has no closed form, so we
average the exact ``max_k P(k | c)`` over many fresh documents (200,000: the
standard error is printed with it); this is more precise than counting the
Bayes classifier's hits on the same documents.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

VOCAB = 32_754            # words, as in the report
TOPICS = 4                # classes
ZIPF_S, ZIPF_Q = 1.05, 2.7
TOPIC_TILT = 0.35         # tau: how strongly a topic tilts the background frequencies
SHARED_WORDS = 100        # the most frequent words, identical in every topic
LENGTH_MEDIAN, LENGTH_SIGMA, LENGTH_MIN = 120, 0.6, 10
TRAIN_DOCS, TEST_DOCS = 40_960, 8_192
SEED = 2026
#: Each document's inputs are scaled to this length (see :attr:`Corpus.values`).
INPUT_NORM = 32.0


@dataclass(frozen=True)
class Corpus:
    """Documents as sparse rows (CSR): row ``d`` has the words
    ``indices[indptr[d]:indptr[d+1]]`` (ascending) with counts ``counts[...]``."""

    indptr: np.ndarray      # int64, docs + 1
    indices: np.ndarray     # int32, word ids
    counts: np.ndarray      # int32, how often the word occurs in the document
    labels: np.ndarray      # int32, topic of each document
    vocab: int

    @property
    def docs(self) -> int:
        return len(self.labels)

    @property
    def nnz(self) -> int:
        return len(self.indices)

    @property
    def values(self) -> np.ndarray:
        """The network's inputs for the non-zero words: tf-idf, ``log(1 + count)``
        times the word's :func:`idf` weight, scaled so that each document's
        inputs have length ``INPUT_NORM``; float32."""
        v = np.log1p(self.counts.astype(np.float64)) * idf(self.vocab)[self.indices]
        per_doc = np.diff(self.indptr)
        sq = np.zeros(self.docs)
        has = per_doc > 0
        sq[has] = np.add.reduceat(v * v, self.indptr[:-1][has])
        norms = np.repeat(np.sqrt(np.maximum(sq, 1e-30)), per_doc)
        return (INPUT_NORM * v / norms).astype(np.float32)

    @property
    def lengths(self) -> np.ndarray:
        """Words per document (with repeats)."""
        return np.add.reduceat(self.counts, self.indptr[:-1]) if self.nnz else np.zeros(self.docs, int)

    def rows(self, start: int, stop: int) -> "Corpus":
        """Documents ``start`` to ``stop - 1`` as a corpus of their own."""
        if not 0 <= start <= stop <= self.docs:
            raise ValueError(f"rows must satisfy 0 <= start <= stop <= {self.docs}, got {start}, {stop}")
        lo, hi = self.indptr[start], self.indptr[stop]
        return Corpus(self.indptr[start:stop + 1] - lo, self.indices[lo:hi], self.counts[lo:hi],
                      self.labels[start:stop], self.vocab)

    def dense(self, dtype=np.float32) -> np.ndarray:
        """The inputs as a dense docs x vocab matrix (zeros where a word is absent)."""
        out = np.zeros((self.docs, self.vocab), dtype)
        rows = np.repeat(np.arange(self.docs), np.diff(self.indptr))
        out[rows, self.indices] = self.values
        return out


@functools.lru_cache(maxsize=4)
def idf(vocab: int = VOCAB, seed: int = SEED) -> np.ndarray:
    """Inverse document frequency of each word, ``log(1 / P(word in a document))``,
    computed from the model (a document of median length, averaged over the
    topics): near 0 for words every document has, large for rare words. It
    keeps the 100 function words, present in nearly every document, from
    dominating the inputs."""
    p = topic_distributions(vocab, seed)
    present = 1.0 - np.exp(LENGTH_MEDIAN * np.log1p(-p))       # P(word occurs at least once)
    return -np.log(present.mean(axis=0))


def zipf(vocab: int = VOCAB) -> np.ndarray:
    """The background word frequencies, most frequent first (sums to 1)."""
    p = 1.0 / (np.arange(1, vocab + 1) + ZIPF_Q) ** ZIPF_S
    return p / p.sum()


@functools.lru_cache(maxsize=4)
def topic_distributions(vocab: int = VOCAB, seed: int = SEED) -> np.ndarray:
    """``K x V`` word probabilities of the topics (each row sums to 1)."""
    if vocab <= SHARED_WORDS:
        raise ValueError(f"vocab must exceed the {SHARED_WORDS} shared words, got {vocab}")
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((TOPICS, vocab))
    g[:, :SHARED_WORDS] = 0.0
    p = zipf(vocab)[None, :] * np.exp(TOPIC_TILT * g)
    return p / p.sum(axis=1, keepdims=True)


def sample(docs: int, vocab: int = VOCAB, seed: int = SEED, stream: int = 0) -> Corpus:
    """``docs`` documents from the model (``stream`` picks an independent draw:
    0 training, 1 test, 2 the Bayes estimate)."""
    if docs < 1:
        raise ValueError(f"docs must be a positive number of documents, got {docs}")
    topics = topic_distributions(vocab, seed)
    rng = np.random.default_rng([seed, stream])
    labels = rng.integers(0, TOPICS, docs).astype(np.int32)
    lengths = np.maximum(LENGTH_MIN, np.rint(rng.lognormal(np.log(LENGTH_MEDIAN), LENGTH_SIGMA, docs))).astype(np.int64)
    doc_of_token = np.repeat(np.arange(docs, dtype=np.int64), lengths)
    words = np.empty(len(doc_of_token), np.int64)
    token_topic = labels[doc_of_token]
    cdf = np.cumsum(topics, axis=1)
    cdf[:, -1] = 1.0
    for k in range(TOPICS):              # inverse-CDF sampling, one topic at a time
        mask = token_topic == k
        words[mask] = np.searchsorted(cdf[k], rng.random(int(mask.sum())), side="right")
    keys, counts = np.unique(doc_of_token * vocab + words, return_counts=True)
    rows = keys // vocab
    indptr = np.zeros(docs + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=docs), out=indptr[1:])
    return Corpus(indptr, (keys % vocab).astype(np.int32), counts.astype(np.int32), labels, vocab)


@functools.lru_cache(maxsize=2)
def corpus(vocab: int = VOCAB, train: int = TRAIN_DOCS, test: int = TEST_DOCS,
           seed: int = SEED) -> tuple[Corpus, Corpus]:
    """The chapter's training and test sets (generated on first use, a few seconds)."""
    return sample(train, vocab, seed, stream=0), sample(test, vocab, seed, stream=1)


def log_posterior(c: Corpus, seed: int = SEED) -> np.ndarray:
    """``docs x K`` log P(k | document), exact under the generating model."""
    log_p = np.log(topic_distributions(c.vocab, seed))            # K x V
    contrib = c.counts[:, None] * log_p[:, c.indices].T           # nnz x K
    scores = np.add.reduceat(contrib, c.indptr[:-1], axis=0)
    scores[np.diff(c.indptr) == 0] = 0.0
    scores -= scores.max(axis=1, keepdims=True)                   # uniform prior: log pi_k cancels
    return scores - np.log(np.exp(scores).sum(axis=1, keepdims=True))


def bayes_predict(c: Corpus, seed: int = SEED) -> np.ndarray:
    """The Bayes classifier's topic for each document."""
    return log_posterior(c, seed).argmax(axis=1)


def bayes_cross_entropy(c: Corpus, seed: int = SEED) -> float:
    """The Bayes posterior's mean cross-entropy on ``c``, ``-mean log P(y | c)``
    (nats). Averaged over fresh documents it estimates the conditional entropy
    of the topic given the document: no classifier's expected loss on unseen
    documents is lower (its excess is the mean KL divergence from the posterior)."""
    return float(-np.mean(log_posterior(c, seed)[np.arange(c.docs), c.labels]))


@functools.lru_cache(maxsize=4)
def bayes_accuracy(vocab: int = VOCAB, docs: int = 200_000, seed: int = SEED) -> tuple[float, float]:
    """The Bayes-optimal accuracy ``E[max_k P(k | c)]`` and its standard error,
    averaged over ``docs`` fresh documents in chunks."""
    values = []
    chunk = 25_000
    for i in range(0, docs, chunk):
        c = sample(min(chunk, docs - i), vocab, seed, stream=1000 + i // chunk)
        values.append(np.exp(log_posterior(c, seed).max(axis=1)))
    v = np.concatenate(values)
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v)))
