"""Decoding one image to a square uint8 array: shorter side resized to R, then centre-cropped."""

from __future__ import annotations

import numpy as np
from PIL import Image

from tianfeng.trainers.data.sources import DataSourceError


def to_square(image: Image.Image, resolution: int) -> Image.Image:
    w, h = image.size
    scale = resolution / min(w, h)
    if (w, h) != (resolution, resolution):
        new_w, new_h = max(resolution, round(w * scale)), max(resolution, round(h * scale))
        image = image.resize((new_w, new_h), Image.BILINEAR, reducing_gap=3.0)
        left, top = (new_w - resolution) // 2, (new_h - resolution) // 2
        image = image.crop((left, top, left + resolution, top + resolution))
    return image


def decode_file(path: str, resolution: int, channels: int) -> np.ndarray:
    try:
        with Image.open(path) as img:
            img.draft("RGB" if channels == 3 else "L", (resolution, resolution))  # JPEG DCT scaling
            img = img.convert("RGB" if channels == 3 else "L")
            out = np.array(to_square(img, resolution), dtype=np.uint8)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:  # PIL's ways to fail
        raise DataSourceError(f"{path}: cannot decode this image ({exc}); remove or replace the file") from None
    return out if out.ndim == 3 else out[..., None]


def resize_array(image: np.ndarray, resolution: int) -> np.ndarray:
    if image.shape[0] == resolution and image.shape[1] == resolution:
        return image
    mode_img = Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image)
    out = np.array(to_square(mode_img, resolution), dtype=np.uint8)
    return out if out.ndim == 3 else out[..., None]
