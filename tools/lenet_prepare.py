"""Prepare the LeNet chapter's digits: ``python tools/lenet_prepare.py``.

Reads the 8 x 8 handwritten digits that scikit-learn ships inside its package
(no download), splits them once into train and test digits by a stratified
random split with a fixed seed, draws the test batch's 10,000 augmentations
(affine maps, also from a fixed seed) and writes ``labdata/lenet/digits.npz``
with the SHA-256 of the rendered test batch. Only this script needs
scikit-learn; the chapter loads the file it writes. Run it again to repair a
damaged file: the output is the same bytes every time.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpulab.workloads.lenet import data  # noqa: E402


def main() -> int:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = digits.images.astype(np.uint8)           # 1797 x 8 x 8, values 0..16
    labels = digits.target.astype(np.uint8)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=data.TEST_FRACTION, stratify=labels, random_state=data.SPLIT_SEED)
    rng = np.random.default_rng(data.AUGMENT_SEED)
    # Every test digit about equally often (22 or 23 times), in a shuffled order.
    source = np.resize(np.arange(len(test_x)), data.TEST_BATCH)
    source = rng.permutation(source).astype(np.int32)
    affine = data.random_affines(data.TEST_BATCH, rng)
    rendered = data.render(test_x[source], affine)
    data.DATA_DIR.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(data.DIGITS_FILE, train_images=train_x, train_labels=train_y, test_images=test_x,
                        test_labels=test_y, test_source=source, test_affine=affine,
                        test_sha256=np.array(data.digest(rendered)))
    counts = np.bincount(test_y, minlength=data.CLASSES)
    print(f"{len(train_x)} train digits, {len(test_x)} test digits (per class {counts.min()}-{counts.max()}); "
          f"test batch of {data.TEST_BATCH} augmentations -> {data.DIGITS_FILE}")
    data.load_digits()                                # what the chapter will check on loading
    return 0


if __name__ == "__main__":
    sys.exit(main())
