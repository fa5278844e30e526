"""MNIST from the standard IDX files, with no TensorFlow and no network unless asked.

Why our own reader: the training jobs run on cluster nodes that usually have no internet, so the
data must come from a shared folder (`--data_dir`) and a broken or truncated file must fail with a
message that says which file and what was wrong, not with a reshape error deep inside training.

Layout accepted in `data_dir` (each file plain or `.gz`):
  train-images-idx3-ubyte, train-labels-idx1-ubyte  (60k training set, optional)
  t10k-images-idx3-ubyte,  t10k-labels-idx1-ubyte   (10k test set)
With the training files the held-out set is the 10k test set.  With only the test files they are
split deterministically (default 4/5 train, 1/5 held-out: 8k / 2k); that choice is logged.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Optional

import numpy as np

from tf_for_slurm.errors import UsageError

log = logging.getLogger(__name__)

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"

# md5 of the standard gzip files, so a download cut short or a wrong mirror is caught.
STANDARD_MD5 = {
    TRAIN_IMAGES + ".gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    TRAIN_LABELS + ".gz": "d53e105ee54ea40749a09fcbcd1e9432",
    TEST_IMAGES + ".gz": "9fb629c4189551a2d022fa330f9573f3",
    TEST_LABELS + ".gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
DEFAULT_MIRROR = "https://storage.googleapis.com/cvdf-datasets/mnist/"

_IDX_DTYPES = {0x08: np.uint8}  # MNIST only uses unsigned bytes
IMAGE_MAGIC = 0x00000803  # ubyte, 3 dimensions
LABEL_MAGIC = 0x00000801  # ubyte, 1 dimension


def _open(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def read_idx(path: str, expected_magic: Optional[int] = None) -> np.ndarray:
    """Read one IDX file (plain or gzip) into a numpy array after checking its header.

    The header is big-endian: two zero bytes, a type code, the number of dimensions, then one
    uint32 per dimension.  The payload length must match the dimensions exactly.
    """
    try:
        with _open(path) as f:
            raw = f.read()
    except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError
        raise UsageError(f"{path}: cannot read IDX file ({e})") from None
    if len(raw) < 4:
        raise UsageError(f"{path}: {len(raw)} bytes: expected an IDX header of at least 4 bytes")
    zero, type_code, ndim = struct.unpack(">HBB", raw[:4])
    magic = struct.unpack(">I", raw[:4])[0]
    if zero != 0 or type_code not in _IDX_DTYPES or ndim == 0:
        raise UsageError(f"{path}: magic=0x{magic:08x}: expected an unsigned-byte IDX header "
                         "(0x00000801 labels or 0x00000803 images)")
    if expected_magic is not None and magic != expected_magic:
        raise UsageError(f"{path}: magic=0x{magic:08x}: expected 0x{expected_magic:08x}")
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise UsageError(f"{path}: {len(raw)} bytes: expected a header of {header_len} bytes "
                         f"for {ndim} dimensions")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header_len])
    dtype = _IDX_DTYPES[type_code]
    expected = int(np.prod(dims, dtype=np.int64)) * np.dtype(dtype).itemsize
    payload = len(raw) - header_len
    if payload != expected:
        raise UsageError(f"{path}: payload of {payload} bytes: expected {expected} bytes for "
                         f"dimensions {tuple(dims)} (file truncated or corrupt?)")
    return np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(dims)


def write_idx(path: str, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzip when the name ends in .gz); used by tests."""
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    header = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(header + arr.tobytes())


def _find(data_dir: str, stem: str) -> Optional[str]:
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.isfile(p):
            return p
    return None


def _read_pair(data_dir: str, images_stem: str, labels_stem: str) -> tuple:
    ip, lp = _find(data_dir, images_stem), _find(data_dir, labels_stem)
    assert ip and lp
    images = read_idx(ip, IMAGE_MAGIC)
    labels = read_idx(lp, LABEL_MAGIC)
    if images.shape[1:] != (28, 28):
        raise UsageError(f"{ip}: image shape {images.shape[1:]}: expected (28, 28)")
    if images.shape[0] != labels.shape[0]:
        raise UsageError(f"{ip} has {images.shape[0]} images but {lp} has {labels.shape[0]} "
                         "labels: expected the same count")
    if labels.size and labels.max() > 9:
        raise UsageError(f"{lp}: label {int(labels.max())}: expected labels 0..9")
    return images, labels


@dataclass(frozen=True)
class MnistData:
    """Training and held-out arrays: images float32 in [0,1] shaped (N, 784), labels int64."""

    train_images: np.ndarray
    train_labels: np.ndarray
    heldout_images: np.ndarray
    heldout_labels: np.ndarray
    source: str  # how the split was made, for logs and metrics


def _as_float(images: np.ndarray) -> np.ndarray:
    return (images.reshape(images.shape[0], -1).astype(np.float32) / 255.0)


def load_mnist(data_dir: str, heldout: Optional[int] = None, seed: int = 0) -> MnistData:
    """Load MNIST from `data_dir`; split the 10k test set when the training files are absent.

    `heldout` (default: a fifth, i.e. 2000 of the 10k) and `seed` only matter for the split: the
    same seed gives every task of the job the same split, so no worker ever trains on the chief's
    held-out examples.
    """
    if not data_dir or not os.path.isdir(data_dir):
        raise UsageError(f"--data_dir={data_dir!r}: expected a folder holding the MNIST IDX files "
                         f"({TEST_IMAGES}[.gz], {TEST_LABELS}[.gz], optionally {TRAIN_IMAGES}[.gz], "
                         f"{TRAIN_LABELS}[.gz]); use --download on a machine with internet")
    have_train = _find(data_dir, TRAIN_IMAGES) and _find(data_dir, TRAIN_LABELS)
    have_test = _find(data_dir, TEST_IMAGES) and _find(data_dir, TEST_LABELS)
    if have_train and have_test:
        tx, ty = _read_pair(data_dir, TRAIN_IMAGES, TRAIN_LABELS)
        hx, hy = _read_pair(data_dir, TEST_IMAGES, TEST_LABELS)
        source = f"train={tx.shape[0]} (training files), held-out={hx.shape[0]} (t10k files)"
    elif have_test:
        x, y = _read_pair(data_dir, TEST_IMAGES, TEST_LABELS)
        if heldout is None:
            heldout = x.shape[0] // 5
        if not 0 < heldout < x.shape[0]:
            raise UsageError(f"heldout={heldout}: expected 0 < heldout < {x.shape[0]} "
                             "(the number of t10k examples)")
        order = np.random.RandomState(seed).permutation(x.shape[0])
        h, t = order[:heldout], order[heldout:]
        tx, ty, hx, hy = x[t], y[t], x[h], y[h]
        source = (f"train={tx.shape[0]}, held-out={hx.shape[0]}: split of the t10k files "
                  f"(seed {seed}); no training files in {data_dir}")
        log.info("MNIST training files absent in %s: splitting the %d test examples into "
                 "%d train / %d held-out (seed %d)", data_dir, x.shape[0], tx.shape[0],
                 hx.shape[0], seed)
    else:
        raise UsageError(f"--data_dir={data_dir!r}: expected {TEST_IMAGES}[.gz] and "
                         f"{TEST_LABELS}[.gz] (and optionally the train-* files), found neither pair "
                         f"among its {len(os.listdir(data_dir))} entries; use --download on a "
                         "machine with internet")
    return MnistData(_as_float(tx), ty.astype(np.int64), _as_float(hx), hy.astype(np.int64), source)


def _md5(path: str) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download_mnist(data_dir: str, mirror: str = DEFAULT_MIRROR, timeout: float = 30.0) -> list:
    """Fetch the four standard gzip files into `data_dir`, verifying each md5.

    Files already present with the right md5 are kept.  Each file is written under a temporary
    name and renamed only once verified, so an interrupted download never looks like data and
    several tasks of one job can download into the same shared folder at once.
    Offline this fails at once with one line naming the mirror and the reason.
    """
    os.makedirs(data_dir, exist_ok=True)
    done = []
    for name, md5 in STANDARD_MD5.items():
        dest = os.path.join(data_dir, name)
        if os.path.isfile(dest) and _md5(dest) == md5:
            done.append(dest)
            continue
        url = mirror.rstrip("/") + "/" + name
        tmp = f"{dest}.part{os.getpid()}"  # every task of a job may download at once
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r, open(tmp, "wb") as f:
                while True:
                    chunk = r.read(1 << 20)
                    if not chunk:
                        break
                    f.write(chunk)
        except (urllib.error.URLError, OSError, ValueError) as e:
            if os.path.exists(tmp):
                os.remove(tmp)
            reason = getattr(e, "reason", e)
            raise UsageError(f"--download: cannot fetch {url} ({reason}): expected network access "
                             f"to the mirror; otherwise copy the IDX files into --data_dir") from None
        got = _md5(tmp)
        if got != md5:
            os.remove(tmp)
            raise UsageError(f"--download: {url} has md5 {got}: expected {md5}")
        os.replace(tmp, dest)
        log.info("downloaded %s", dest)
        done.append(dest)
    return done


class BatchSampler:
    """Endless shuffled mini-batches, a different order per worker (seeded by task index)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, batch_size: int, seed: int):
        if batch_size <= 0:
            raise UsageError(f"--batch_size={batch_size}: expected a positive integer")
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self._rng = np.random.RandomState(seed)
        self._order = self._rng.permutation(len(images))
        self._pos = 0

    def next(self) -> tuple:
        if self._pos + self.batch_size > len(self._order):
            self._order = self._rng.permutation(len(self.images))
            self._pos = 0
        idx = self._order[self._pos:self._pos + self.batch_size]
        self._pos += self.batch_size
        return self.images[idx], self.labels[idx]
