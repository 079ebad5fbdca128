"""The reader of //models/tests:images: 16 images of 32x32 pixels made from a seed.

tiny_images.json holds the seed, the count and a label per image, so the data set is a
few hundred bytes in the repository and the same arrays on every machine: each image is
a stripe pattern (its frequency, angle and colour drawn from numpy's seeded generator)
over a little noise. The labels are the classes the timm ResNet (built seeded, no
pretrained weights) gave the images when they were recorded, two of them changed as
label noise would: a correct package scores top1 0.875.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SIZE = 32


def read(files: list[str]) -> dict[str, np.ndarray]:
    meta = json.loads(Path(files[0]).read_text(encoding="utf-8"))
    count = int(meta["count"])
    rng = np.random.default_rng(int(meta["seed"]))
    rows, cols = np.meshgrid(np.arange(SIZE), np.arange(SIZE), indexing="ij")
    images = np.empty((count, 3, SIZE, SIZE), np.float32)
    for i in range(count):
        frequency = rng.integers(1, 5)
        angle = rng.uniform(0, np.pi)
        colour = rng.uniform(-3, 3, 3)
        wave = np.sin(2 * np.pi * frequency * (np.cos(angle) * cols + np.sin(angle) * rows) / SIZE)
        images[i] = colour[:, None, None] * wave + 0.1 * rng.standard_normal((3, SIZE, SIZE))
    arrays = {"image": images}
    if meta.get("labels") is not None:
        arrays["label"] = np.asarray(meta["labels"], dtype=np.int64)
    return arrays
