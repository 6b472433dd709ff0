"""The chapter's data: real handwritten digits, made into 86 x 86 network inputs.

Source: the 8 x 8 handwritten digits that scikit-learn ships inside its package
(``sklearn.datasets.load_digits``: 1,797 images of the digits 0-9, each pixel a
count 0-16; a copy of the test part of the UCI "Optical Recognition of
Handwritten Digits" data set, by E. Alpaydin and C. Kaynak, licensed CC BY 4.0).
``tools/lenet_prepare.py`` (the only code that needs scikit-learn) splits them
once into train and test digits by a stratified random split with a fixed seed
and writes ``labdata/lenet/digits.npz``. The bundled copy carries no writer
labels, so a test digit may come from a writer who also wrote training digits.

The network's inputs are 86 x 86: a digit is drawn about 64 pixels tall in the
middle of the frame by bilinear interpolation, after a deterministic random
augmentation (a shift of up to 6 pixels, a rotation of up to 15 degrees, a
scale of 0.85-1.15). The affine maps are drawn once from a fixed seed and
stored with the digits, so rendering needs only additions, multiplications
and floor -- the same bytes on every machine, which a stored SHA-256 checks.
The test batch of 10,000 images holds only augmentations of test digits.
Pixels are stored as uint8 and given to the network as ``value / 255``.
"""
from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

from ... import paths

IMAGE = 86                 # the network's input is 1 x 86 x 86
DIGIT = 8                  # the bundled digits are 8 x 8, pixel values 0..16
DIGIT_MAX = 16
CLASSES = 10
DIGIT_PIXELS = 8.0         # an unscaled digit pixel covers 8 x 8 input pixels: 64 x 64 in all
TEST_BATCH = 10_000        # augmented test images (the chapter's largest batch)
SPLIT_SEED = 2026          # the stratified train/test split
TEST_FRACTION = 0.25
AUGMENT_SEED = 86          # the test batch's affine maps
MAX_SHIFT = 6.0            # pixels
MAX_ROTATION = 15.0        # degrees
SCALES = (0.85, 1.15)

DATA_DIR = paths.LABDATA / "lenet"
DIGITS_FILE = DATA_DIR / "digits.npz"
REGENERATE = ("regenerate it with `python tools/lenet_prepare.py` (needs scikit-learn; it rewrites "
              "labdata/lenet/digits.npz), then retrain with `python tools/lenet_train.py`")

#: What digits.npz holds: name -> (dtype, shape; None for sizes the split decides).
DIGITS_ARRAYS = {
    "train_images": ("uint8", (None, DIGIT, DIGIT)), "train_labels": ("uint8", (None,)),
    "test_images": ("uint8", (None, DIGIT, DIGIT)), "test_labels": ("uint8", (None,)),
    "test_source": ("int32", (TEST_BATCH,)), "test_affine": ("float32", (TEST_BATCH, 2, 3)),
    "test_sha256": ("<U64", ()),
}


class DataError(ValueError):
    """A prepared file is missing, unreadable or not what the chapter expects."""


def load_npz(path: Path, expected: dict, what: str, regenerate: str) -> dict[str, np.ndarray]:
    """Every array of ``path`` with its dtype and shape checked against ``expected``
    (name -> (dtype, shape), None for a free dimension); a clear :class:`DataError`
    naming the file, the problem and how to regenerate it otherwise."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{what} file {paths.display_path(path)} is missing; {regenerate}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as exc:
        raise DataError(f"{what} file {paths.display_path(path)} is corrupted or not an .npz "
                        f"archive ({type(exc).__name__}: {exc}); {regenerate}") from None
    for name, (dtype, shape) in expected.items():
        if name not in arrays:
            raise DataError(f"{what} file {paths.display_path(path)} lacks the array '{name}' "
                            f"(it has {sorted(arrays)}); {regenerate}")
        a = arrays[name]
        if not isinstance(a, np.ndarray):
            raise DataError(f"{what} file {paths.display_path(path)} is corrupted: '{name}' is not a "
                            f"NumPy array; {regenerate}")
        ok_shape = len(a.shape) == len(shape) and all(e is None or e == s for e, s in zip(shape, a.shape))
        if a.dtype != np.dtype(dtype) or not ok_shape:
            want = "(" + ", ".join("any" if e is None else str(e) for e in shape) + ")"
            raise DataError(f"{what} file {paths.display_path(path)}: '{name}' should be {dtype} of shape "
                            f"{want}, found {a.dtype} of shape {a.shape}; {regenerate}")
    return arrays


def load_digits(path: Path = DIGITS_FILE) -> dict[str, np.ndarray]:
    """The prepared split (see the module docstring), checked."""
    d = load_npz(path, DIGITS_ARRAYS, "the digits", REGENERATE)
    for part in ("train", "test"):
        images, labels = d[f"{part}_images"], d[f"{part}_labels"]
        if len(images) != len(labels) or len(images) == 0:
            raise DataError(f"{paths.display_path(path)}: {len(images)} {part} images but {len(labels)} "
                            f"labels; {REGENERATE}")
        if images.max() > DIGIT_MAX or labels.max() >= CLASSES:
            raise DataError(f"{paths.display_path(path)}: {part} pixels must be 0..{DIGIT_MAX} and labels "
                            f"0..{CLASSES - 1}; found up to {images.max()} and {labels.max()}; {REGENERATE}")
    if d["test_source"].min() < 0 or d["test_source"].max() >= len(d["test_images"]):
        raise DataError(f"{paths.display_path(path)}: test_source must index the {len(d['test_images'])} "
                        f"test digits; {REGENERATE}")
    return d


# ----------------------------------------------------------------- augmentation and rendering
def random_affines(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` maps from input-pixel coordinates (row, column, 1) to digit coordinates:
    a random shift, rotation and scale around the frame's centre, float32 (n, 2, 3)."""
    angle = np.deg2rad(rng.uniform(-MAX_ROTATION, MAX_ROTATION, n))
    scale = rng.uniform(*SCALES, n) * DIGIT_PIXELS
    shift = rng.uniform(-MAX_SHIFT, MAX_SHIFT, (n, 2))
    cos, sin = np.cos(angle) / scale, np.sin(angle) / scale
    centre = IMAGE / 2 + shift                                    # where the digit's centre lands
    a = np.empty((n, 2, 3))
    # digit = R(-angle) (pixel - centre) / scale + DIGIT/2, pixels and digit cells measured at centres
    a[:, 0, 0], a[:, 0, 1] = cos, sin
    a[:, 1, 0], a[:, 1, 1] = -sin, cos
    py, px = centre[:, 0] - 0.5, centre[:, 1] - 0.5
    a[:, 0, 2] = -(cos * py + sin * px) + DIGIT / 2 - 0.5
    a[:, 1, 2] = -(-sin * py + cos * px) + DIGIT / 2 - 0.5
    return a.astype(np.float32)


def render(digits: np.ndarray, affines: np.ndarray) -> np.ndarray:
    """Draw each 8 x 8 digit (uint8 0..16) into an 86 x 86 uint8 image through its
    affine map, by bilinear interpolation with zeros outside the digit. Only +, *
    and floor on float64: the same bytes on every machine."""
    digits = np.asarray(digits)
    affines = np.asarray(affines, dtype=np.float32).astype(np.float64)
    if digits.ndim != 3 or digits.shape[1:] != (DIGIT, DIGIT) or affines.shape != (len(digits), 2, 3):
        raise ValueError(f"render needs digits (n, {DIGIT}, {DIGIT}) and affines (n, 2, 3); got "
                         f"{digits.shape} and {affines.shape}")
    n = len(digits)
    padded = np.zeros((n, DIGIT + 2, DIGIT + 2))                 # a zero border: no bounds tests
    padded[:, 1:-1, 1:-1] = digits / DIGIT_MAX
    flat = padded.reshape(n, -1)
    rows = np.arange(IMAGE, dtype=np.float64)
    r, c = rows[:, None], rows[None, :]
    out = np.empty((n, IMAGE, IMAGE), np.uint8)
    for i in range(n):
        a = affines[i]
        u = a[0, 0] * r + a[0, 1] * c + a[0, 2] + 1.0            # +1: the border
        v = a[1, 0] * r + a[1, 1] * c + a[1, 2] + 1.0
        np.clip(u, 0.0, DIGIT + 0.999, out=u)
        np.clip(v, 0.0, DIGIT + 0.999, out=v)
        u0, v0 = np.floor(u), np.floor(v)
        fu, fv = u - u0, v - v0
        k = (u0 * (DIGIT + 2) + v0).astype(np.intp)
        img = flat[i]
        top = img[k] * (1.0 - fv) + img[k + 1] * fv
        bottom = img[k + DIGIT + 2] * (1.0 - fv) + img[k + DIGIT + 3] * fv
        value = top * (1.0 - fu) + bottom * fu
        out[i] = np.floor(value * 255.0 + 0.5).astype(np.uint8)
    return out


def to_input(images: np.ndarray) -> np.ndarray:
    """uint8 images (n, 86, 86) as the network's float32 input (n, 1, 86, 86), value / 255."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (IMAGE, IMAGE):
        raise ValueError(f"expected uint8 images of shape (n, {IMAGE}, {IMAGE}), got {images.dtype} "
                         f"{images.shape}")
    return (images.astype(np.float32) / np.float32(255.0))[:, None]


def digest(images: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(images, dtype=np.uint8).tobytes()).hexdigest()


def test_batch(n: int = TEST_BATCH, digits: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` images of the test batch (uint8, n x 86 x 86) and their labels.
    Rendering all 10,000 takes a few seconds; then their SHA-256 is checked against
    the one stored when the data was prepared."""
    if not 1 <= n <= TEST_BATCH:
        raise ValueError(f"the test batch has {TEST_BATCH} images; asked for {n}")
    d = digits if digits is not None else load_digits()
    source = d["test_source"][:n]
    images = render(d["test_images"][source], d["test_affine"][:n])
    if n == TEST_BATCH and digest(images) != str(d["test_sha256"]):
        raise DataError(f"the rendered test batch does not match the SHA-256 stored in "
                        f"{paths.display_path(DIGITS_FILE)}; the file was changed or damaged: {REGENERATE}")
    return images, d["test_labels"][source]


def test_inputs(n: int, digits: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` test images as network inputs (float32 n x 1 x 86 x 86) and labels."""
    images, labels = test_batch(n, digits)
    return to_input(images), labels
