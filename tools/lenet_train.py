"""Train the LeNet chapter's network on the CPU: ``python tools/lenet_train.py``.

NumPy only, deterministic: the weights' initialisation, the training
augmentations (fresh affine maps of the 1,347 training digits every epoch) and
the order of the examples all come from fixed seeds, and BLAS runs on one
thread so that sums are added in the same order on every run. Plain
mini-batch Adam on the softmax cross-entropy; the backward pass of each layer
is written out below (im2col for the convolutions, the max-pool's gradient
goes to the window's maximum).

At the end the float64 reference network (``gpulab.workloads.lenet.network``)
classifies the 10,000 test images; the weights, its predictions and both
accuracies go to ``labdata/lenet/weights.npz``. About two minutes on two cores.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"          # one thread: the same order of additions on every run

import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpulab.workloads.lenet import data, network  # noqa: E402
from gpulab.workloads.lenet.network import CONV1, CONV2, FLAT, HIDDEN  # noqa: E402

SEED = 408
EPOCHS = 10
BATCH = 32
LEARNING_RATE = 2e-3
LR_DECAY = 0.8                      # per epoch
BETAS, EPS = (0.9, 0.999), 1e-8


def init_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """He-uniform weights (variance 2 / fan-in), zero biases, float32."""
    def he(shape, fan_in):
        bound = np.sqrt(6.0 / fan_in)
        return rng.uniform(-bound, bound, shape).astype(np.float32)
    return {"conv1": he(CONV1.w_shape, CONV1.taps), "conv2": he(CONV2.w_shape, CONV2.taps),
            "fc1": he((HIDDEN, FLAT), FLAT), "fc1_bias": np.zeros(HIDDEN, np.float32),
            "fc2": he((data.CLASSES, HIDDEN), HIDDEN), "fc2_bias": np.zeros(data.CLASSES, np.float32)}


def windows(x: np.ndarray, k: int) -> np.ndarray:
    """im2col of NHWC x: (B, E, F, k, k, C), a strided view."""
    b, h, w, c = x.shape
    sb, sh, sw, sc = x.strides
    return np.lib.stride_tricks.as_strided(x, (b, h - k + 1, w - k + 1, k, k, c), (sb, sh, sw, sh, sw, sc))


def pool_forward(a: np.ndarray):
    b, h, w, c = a.shape
    blocks = a.reshape(b, h // 2, 2, w // 2, 2, c)
    return blocks.max(axis=(2, 4)), blocks


def pool_relu_backward(blocks: np.ndarray, pooled: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """Gradient through ReLU and max-pool: to each window's maximum, where it is positive."""
    b, h2, _, w2, _, c = blocks.shape
    mask = (blocks == pooled[:, :, None, :, None, :]) & (blocks > 0)
    return (mask * grad[:, :, None, :, None, :]).reshape(b, 2 * h2, 2 * w2, c)


def step(w: dict, x: np.ndarray, y: np.ndarray):
    """Loss, correct count and gradients for one batch (x: B x 86 x 86 float32)."""
    k = CONV1.K
    b = len(x)
    x4 = np.ascontiguousarray(x[..., None])
    cols1 = windows(x4, k).reshape(b * CONV1.E * CONV1.E, CONV1.taps)
    w1 = w["conv1"].reshape(CONV1.M, CONV1.taps)                       # C = 1: (r, s) order
    a1 = np.maximum(cols1 @ w1.T, 0).reshape(b, CONV1.E, CONV1.E, CONV1.M)
    p1, blocks1 = pool_forward(a1)
    cols2 = windows(np.ascontiguousarray(p1), k).reshape(b * CONV2.E * CONV2.E, CONV2.taps)
    w2 = w["conv2"].transpose(0, 2, 3, 1).reshape(CONV2.M, CONV2.taps)  # (r, s, c) order, as cols2
    a2 = np.maximum(cols2 @ w2.T, 0).reshape(b, CONV2.E, CONV2.E, CONV2.M)
    p2, blocks2 = pool_forward(a2)
    flat = p2.transpose(0, 3, 1, 2).reshape(b, FLAT)                    # the network's NCHW order
    hidden = np.maximum(flat @ w["fc1"].T + w["fc1_bias"], 0)
    logits = hidden @ w["fc2"].T + w["fc2_bias"]

    shifted = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(shifted)
    prob /= prob.sum(axis=1, keepdims=True)
    loss = float(-np.log(prob[np.arange(b), y] + 1e-12).mean())
    correct = int((logits.argmax(axis=1) == y).sum())

    g = {}
    d_logits = prob
    d_logits[np.arange(b), y] -= 1.0
    d_logits /= b
    g["fc2"], g["fc2_bias"] = d_logits.T @ hidden, d_logits.sum(axis=0)
    d_hidden = (d_logits @ w["fc2"]) * (hidden > 0)
    g["fc1"], g["fc1_bias"] = d_hidden.T @ flat, d_hidden.sum(axis=0)
    d_p2 = (d_hidden @ w["fc1"]).reshape(b, CONV2.M, CONV2.P, CONV2.P).transpose(0, 2, 3, 1)
    d_z2 = pool_relu_backward(blocks2, p2, d_p2).reshape(-1, CONV2.M)
    g["conv2"] = (d_z2.T @ cols2).reshape(CONV2.M, k, k, CONV2.C).transpose(0, 3, 1, 2)
    d_cols2 = (d_z2 @ w2).reshape(b, CONV2.E, CONV2.E, k, k, CONV2.C)
    d_p1 = np.zeros_like(p1)
    for r in range(k):
        for s in range(k):
            d_p1[:, r:r + CONV2.E, s:s + CONV2.E, :] += d_cols2[:, :, :, r, s, :]
    d_z1 = pool_relu_backward(blocks1, p1, d_p1).reshape(-1, CONV1.M)
    g["conv1"] = (d_z1.T @ cols1).reshape(CONV1.w_shape)
    return loss, correct, {name: v.astype(np.float32) for name, v in g.items()}


def train(log=print) -> dict[str, np.ndarray]:
    digits = data.load_digits()
    train_digits, train_labels = digits["train_images"], digits["train_labels"]
    rng = np.random.default_rng(SEED)
    w = init_weights(rng)
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(a) for k, a in w.items()}
    t = 0
    for epoch in range(EPOCHS):
        start = time.perf_counter()
        # A new augmentation of every training digit each epoch, from the seeded generator.
        images = data.to_input(data.render(train_digits, data.random_affines(len(train_digits), rng)))[:, 0]
        order = rng.permutation(len(images))
        lr = LEARNING_RATE * LR_DECAY ** epoch
        losses, correct = [], 0
        for i in range(0, len(order), BATCH):
            idx = order[i:i + BATCH]
            loss, right, grads = step(w, images[idx], train_labels[idx].astype(np.intp))
            losses.append(loss)
            correct += right
            t += 1
            for name, grad in grads.items():
                m[name] = BETAS[0] * m[name] + (1 - BETAS[0]) * grad
                v[name] = BETAS[1] * v[name] + (1 - BETAS[1]) * grad * grad
                m_hat = m[name] / (1 - BETAS[0] ** t)
                v_hat = v[name] / (1 - BETAS[1] ** t)
                w[name] = (w[name] - lr * m_hat / (np.sqrt(v_hat) + EPS)).astype(np.float32)
        log(f"epoch {epoch + 1:2d}: loss {np.mean(losses):.4f}, training accuracy "
            f"{correct / len(order):.4f} ({time.perf_counter() - start:.0f} s)")
    return w, correct / len(order)


def main() -> int:
    started = time.perf_counter()
    weights, train_accuracy = train()
    x, labels = data.test_inputs(data.TEST_BATCH)
    predictions = network.predict(x, weights).astype(np.uint8)      # the float64 reference
    test_accuracy = network.accuracy(predictions, labels)
    np.savez_compressed(network.WEIGHTS_FILE, **weights, test_predictions=predictions,
                        test_accuracy=np.float64(test_accuracy), train_accuracy=np.float64(train_accuracy))
    network.load_weights()                      # what the chapter will check on loading
    print(f"test accuracy {test_accuracy:.4f} on {len(labels)} augmented test images "
          f"(last epoch's training accuracy {train_accuracy:.4f}); {time.perf_counter() - started:.0f} s "
          f"-> {network.WEIGHTS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
