"""The network and its training step in NumPy: the float64 reference every kernel is checked against.

    Z1 = X W1 + b1,   H = sigmoid(Z1),   Z2 = H W2 + b2,   P = softmax(Z2),
    loss = -(1/B) sum_i log P[i, y_i]

with X the batch (B x V, row-major: row i is document i), W1 V x H (row w is
word w's 128 weights, contiguous: what the sparse steps gather), W2 H x C.
Backward, for the mean loss:

    dZ2 = (P - Y) / B,  dW2 = H^T dZ2,  db2 = sum_i dZ2,
    dH = dZ2 W2^T,      dZ1 = dH * H * (1 - H),
    dW1 = X^T dZ1,      db1 = sum_i dZ1,

and plain SGD, ``W -= lr dW``. X may be dense or a :class:`~.data.Corpus`
slice (sparse rows): the products with X are then a gather of W1's rows
(forward) and a scatter-add into dW1's rows (backward).
"""
from __future__ import annotations

import numpy as np

from .data import TOPICS, VOCAB, Corpus

HIDDEN = 128
CLASSES = TOPICS
WEIGHT_SEED = 11
LEARNING_RATE = 0.3

PARAMS = ("W1", "b1", "W2", "b2")


def init_params(vocab: int = VOCAB, hidden: int = HIDDEN, seed: int = WEIGHT_SEED) -> dict:
    """Glorot-uniform weights and zero biases, float32 (what every step starts from)."""
    rng = np.random.default_rng(seed)
    def glorot(fan_in, fan_out):
        a = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, (fan_in, fan_out)).astype(np.float32)
    return {"W1": glorot(vocab, hidden), "b1": np.zeros(hidden, np.float32),
            "W2": glorot(hidden, CLASSES), "b2": np.zeros(CLASSES, np.float32)}


def _as_batch(x, dtype):
    if isinstance(x, Corpus):
        return x
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"X must be a 2-D batch (documents x vocab) or a Corpus, got shape {x.shape}")
    return x.astype(dtype, copy=False)


def segment_sums(rows: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Sums of ``rows[bounds[i]:bounds[i+1]]`` for each i, accumulated in
    float64 through a running sum (NumPy's reduceat is slow along axis 0)."""
    running = np.zeros((len(rows) + 1, rows.shape[1]))
    np.cumsum(rows, axis=0, dtype=np.float64, out=running[1:])
    return running[bounds[1:]] - running[bounds[:-1]]


def x_times(x, w: np.ndarray) -> np.ndarray:
    """X W for a dense X or a sparse Corpus (a gather of W's rows)."""
    if isinstance(x, Corpus):
        contrib = x.values.astype(w.dtype)[:, None] * w[x.indices]
        return segment_sums(contrib, x.indptr).astype(w.dtype)
    return x @ w


def xt_times(x, d: np.ndarray, vocab: int) -> np.ndarray:
    """X^T D (vocab x H) for a dense X or a sparse Corpus (a scatter-add into rows)."""
    if isinstance(x, Corpus):
        out = np.zeros((vocab, d.shape[1]), d.dtype)
        rows = np.repeat(np.arange(x.docs), np.diff(x.indptr))
        order = np.argsort(x.indices, kind="stable")
        words = x.indices[order]
        contrib = x.values.astype(d.dtype)[order, None] * d[rows[order]]
        starts = np.flatnonzero(np.r_[True, words[1:] != words[:-1]]) if len(words) else np.zeros(0, int)
        out[words[starts]] = segment_sums(contrib, np.r_[starts, len(words)])
        return out
    return x.T @ d


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def forward(x, params: dict, dtype=np.float64) -> dict:
    """Activations of one batch: Z1, H, Z2, P."""
    x = _as_batch(x, dtype)
    p = {k: np.asarray(v, dtype) for k, v in params.items()}
    z1 = x_times(x, p["W1"]) + p["b1"]
    h = sigmoid(z1)
    z2 = h @ p["W2"] + p["b2"]
    e = np.exp(z2 - z2.max(axis=1, keepdims=True))
    return {"Z1": z1, "H": h, "Z2": z2, "P": e / e.sum(axis=1, keepdims=True)}


def loss(probs: np.ndarray, labels: np.ndarray) -> float:
    """Mean cross-entropy."""
    return float(-np.mean(np.log(probs[np.arange(len(labels)), labels])))


def backward(x, labels: np.ndarray, params: dict, acts: dict, dtype=np.float64) -> dict:
    """Gradients of the mean loss: dW1, db1, dW2, db2 (and dZ2, dZ1 for the kernels' checks)."""
    x = _as_batch(x, dtype)
    b = len(labels)
    w2 = np.asarray(params["W2"], dtype)
    dz2 = acts["P"].copy()
    dz2[np.arange(b), labels] -= 1.0
    dz2 /= b
    dh = dz2 @ w2.T
    dz1 = dh * acts["H"] * (1.0 - acts["H"])
    vocab = params["W1"].shape[0]
    return {"dW1": xt_times(x, dz1, vocab), "db1": dz1.sum(axis=0), "dW2": acts["H"].T @ dz2,
            "db2": dz2.sum(axis=0), "dZ2": dz2, "dZ1": dz1}


def sgd_step(x, labels: np.ndarray, params: dict, lr: float = LEARNING_RATE,
             dtype=np.float64) -> tuple[dict, float]:
    """One SGD step: returns (new params in ``dtype``, the batch's loss before the step)."""
    acts = forward(x, params, dtype)
    grads = backward(x, labels, params, acts, dtype)
    new = {k: np.asarray(params[k], dtype) - lr * grads["d" + k] for k in PARAMS}
    return new, loss(acts["P"], labels)


def predict(x, params: dict, dtype=np.float32) -> np.ndarray:
    return forward(x, params, dtype)["P"].argmax(axis=1)


def accuracy(c: Corpus, params: dict, batch: int = 4096) -> float:
    """Share of documents of ``c`` whose predicted topic is right."""
    hits = 0
    for i in range(0, c.docs, batch):
        part = c.rows(i, min(c.docs, i + batch))
        hits += int((predict(part, params) == part.labels).sum())
    return hits / c.docs


def train(train_set: Corpus, params: dict, batch: int, steps: int, lr: float = LEARNING_RATE,
          dtype=np.float64) -> tuple[dict, np.ndarray]:
    """``steps`` SGD steps over consecutive batches (wrapping around the
    training set); returns the parameters and the loss of every step."""
    losses = np.empty(steps)
    per_epoch = train_set.docs // batch
    if per_epoch < 1:
        raise ValueError(f"batch {batch} exceeds the {train_set.docs} training documents")
    for s in range(steps):
        i = (s % per_epoch) * batch
        part = train_set.rows(i, i + batch)
        params, losses[s] = sgd_step(part, part.labels, params, lr, dtype)
    return params, losses
