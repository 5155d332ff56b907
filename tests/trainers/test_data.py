"""Data: sources, the pre-decoded cache, loaders that agree pixel for pixel, augmentation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.conftest import SMALL_CLASSES
from tianfeng.core.run_config import DataConfig
from tianfeng.trainers.data import loaders
from tianfeng.trainers.data.augment import (
    AugmentSpec,
    augment,
    batch_generator,
    normalise_and_augment,
    sample_theta,
    to_normalised,
    whole_pixel,
)
from tianfeng.trainers.data.cache import decoded_split
from tianfeng.trainers.data.loaders import build_pipeline
from tianfeng.trainers.data.order import epoch_order, prefetch, rank_slice
from tianfeng.trainers.data.sources import (
    DataSourceError,
    digits_source,
    imagefolder_source,
    open_source,
)
from tianfeng.trainers.data.subset import stratified_subset


def test_digits_is_embedded_and_stratified() -> None:
    src = digits_source()
    assert src.num_classes == 10 and src.channels == 1
    assert len(src.train) + len(src.val) == 1797
    counts = np.bincount(src.val.labels)
    assert counts.min() >= 30  # every digit is in val, in proportion


def test_digits_read_from_the_file_are_what_scikit_learn_loads() -> None:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    src = digits_source()
    images = np.concatenate([src.train.images, src.val.images])[..., 0]
    labels = np.concatenate([src.train.labels, src.val.labels])
    expected = np.clip(bunch.images * 16, 0, 255).astype(np.uint8)
    # the split only reorders: every image keeps its label
    pairs = sorted(zip(map(bytes, images), labels.tolist(), strict=True))
    assert pairs == sorted(zip(map(bytes, expected), bunch.target.tolist(), strict=True))


def test_stratified_subset_is_seeded_and_proportional() -> None:
    labels = np.repeat(np.arange(5), 200)
    a = stratified_subset(labels, 0.1, seed=3)
    assert len(a) == 100 and np.all(np.bincount(labels[a]) == 20)
    assert np.array_equal(a, stratified_subset(labels, 0.1, seed=3))
    assert not np.array_equal(a, stratified_subset(labels, 0.1, seed=4))


def test_imagefolder_reads_real_jpegs(small_imagefolder: Path) -> None:
    src = imagefolder_source(str(small_imagefolder))
    assert src.class_names == list(SMALL_CLASSES)
    assert len(src.train) == 200 and len(src.val) == 50


def test_reopening_a_folder_reuses_the_scan_until_images_change(small_imagefolder: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(small_imagefolder, folder)
    first = imagefolder_source(str(folder))
    assert imagefolder_source(str(folder)) is first  # every trial of a search opens it again
    victim = sorted((folder / "train" / "digit3").iterdir())[0]
    victim.unlink()
    after = imagefolder_source(str(folder))
    assert len(after.train) == len(first.train) - 1 and after.key != first.key
    shutil.copy(sorted((folder / "train" / "digit4").iterdir())[0], folder / "train" / "digit3" / "extra.jpg")
    again = imagefolder_source(str(folder))
    assert len(again.train) == len(first.train) and again.key not in (first.key, after.key)


def test_a_new_process_reads_the_scan_index_instead_of_stating_every_file(
        small_imagefolder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from tianfeng.trainers.data import sources

    folder = tmp_path / "indexed"
    shutil.copytree(small_imagefolder, folder)
    first = imagefolder_source(str(folder))
    sources._OPENED.clear()  # as in another rank or a later process
    scans = []
    real = sources._scan_split
    monkeypatch.setattr(sources, "_scan_split", lambda *a: scans.append(a) or real(*a))
    again = imagefolder_source(str(folder))
    assert scans == [] and again.key == first.key and again.class_names == first.class_names
    assert again.train.files == first.train.files and np.array_equal(again.val.labels, first.val.labels)
    (folder / "train" / "digit3" / sorted(p.name for p in (folder / "train" / "digit3").iterdir())[0]).unlink()
    sources._OPENED.clear()
    changed = imagefolder_source(str(folder))  # another folder state: scanned, not read back
    assert len(scans) == 2 and changed.key != first.key and len(changed.train) == len(first.train) - 1


def test_imagefolder_errors_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(DataSourceError, match="no such directory"):
        open_source(f"imagefolder:{tmp_path / 'missing'}")
    (tmp_path / "train" / "cat").mkdir(parents=True)
    with pytest.raises(DataSourceError, match="train: no .jpg, .jpeg or .png files"):
        open_source(f"imagefolder:{tmp_path}")
    Image.new("RGB", (4, 4)).save(tmp_path / "train" / "cat" / "a.png")
    with pytest.raises(DataSourceError, match=r"val: not a directory"):
        open_source(f"imagefolder:{tmp_path}")


def test_cache_is_built_once_and_keyed_by_resolution(small_imagefolder: Path, tmp_path: Path) -> None:
    src = imagefolder_source(str(small_imagefolder))
    first = decoded_split(src, "train", 16, tmp_path)
    meta = next(tmp_path.rglob("train-16px.json"))
    stamp = meta.stat().st_mtime_ns
    again = decoded_split(src, "train", 16, tmp_path)
    assert meta.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert isinstance(again.images, np.memmap)
    assert np.array_equal(first.images, again.images)
    other = decoded_split(src, "train", 24, tmp_path)
    assert other.images.shape == (200, 24, 24, 3)
    assert first.images.shape == (200, 16, 16, 3)
    assert 60 < np.mean(first.images) < 200  # real pixels, not zeros


def test_rank_slices_deal_the_global_batch_in_turn() -> None:
    order = epoch_order(np.arange(100), seed=0, epoch=0)
    batch = order[:42]  # 42 images to 4 ranks: 10 each, the last 2 dropped
    parts = [batch[rank_slice(42, r, 4)] for r in range(4)]
    assert [len(p) for p in parts] == [10] * 4
    assert np.array_equal(np.stack(parts, axis=1).reshape(-1), batch[:40])  # image i to rank i mod 4


def test_pad_crop_is_an_exact_pixel_shift() -> None:
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    theta = sample_theta(AugmentSpec("pad_crop", flip=False, pad_fraction=0.25), 2, 8,
                         batch_generator(0, 0, 0))
    out = augment(x, theta, 8)
    for i in range(2):
        dx, dy = round(theta[i, 0, 2].item() * 4), round(theta[i, 1, 2].item() * 4)
        shifted = torch.zeros_like(x[i])
        src = x[i][:, max(dy, 0):8 + min(dy, 0), max(dx, 0):8 + min(dx, 0)]
        shifted[:, max(-dy, 0):8 - max(dy, 0), max(-dx, 0):8 - max(dx, 0)] = src
        torch.testing.assert_close(out[i], shifted)


@pytest.mark.parametrize("resolution", [8, 16, 32])
def test_pad_crop_gather_into_channels_last_equals_grid_sample(resolution: int) -> None:
    torch.manual_seed(resolution)
    images = torch.randint(0, 256, (64, resolution, resolution, 3), dtype=torch.uint8)
    mean, std = torch.tensor([120.0, 110.0, 100.0]), torch.tensor([60.0, 55.0, 50.0])
    theta = sample_theta(AugmentSpec("pad_crop", flip=True), 64, resolution, batch_generator(1, 0, resolution))
    assert whole_pixel(theta, resolution)
    assert (theta[:, 0, 0] < 0).any() and (theta[:, 0, 0] > 0).any() and (theta[:, :, 2] != 0).any()
    gathered = normalise_and_augment(images, mean, std, theta, resolution, torch.channels_last)
    resampled = augment(to_normalised(images, mean, std), theta, resolution)  # grid_sample, NCHW
    assert gathered.is_contiguous(memory_format=torch.channels_last) and resampled.is_contiguous()
    torch.testing.assert_close(gathered, resampled, rtol=0, atol=1e-5)
    assert (gathered == 0).any()  # some pixels shifted in from outside: the mean colour
    torch.testing.assert_close(normalise_and_augment(images, mean, std, theta, resolution, torch.contiguous_format),
                               resampled, rtol=0, atol=0)


def test_only_whole_pixel_thetas_take_the_gather() -> None:
    crops = sample_theta(AugmentSpec("random_resized_crop", flip=True), 8, 16, batch_generator(0, 0, 0))
    assert not whole_pixel(crops, 16)
    half_pixel = sample_theta(AugmentSpec("pad_crop", flip=False), 8, 16, batch_generator(0, 0, 0))
    half_pixel[0, 0, 2] += 1 / 16
    assert not whole_pixel(half_pixel, 16)
    images = torch.randint(0, 256, (8, 16, 16, 3), dtype=torch.uint8)
    mean, std = torch.full((3,), 127.0), torch.full((3,), 64.0)
    torch.testing.assert_close(normalise_and_augment(images, mean, std, half_pixel, 16, torch.channels_last),
                               augment(to_normalised(images, mean, std), half_pixel, 16))


def test_random_resized_crop_changes_resolution_and_is_seeded() -> None:
    spec = AugmentSpec("random_resized_crop", flip=True)
    t1 = sample_theta(spec, 16, 32, batch_generator(1, 2, 3))
    t2 = sample_theta(spec, 16, 32, batch_generator(1, 2, 3))
    assert torch.equal(t1, t2)
    assert (t1[:, 0, 0] < 0).any() and (t1[:, 0, 0] > 0).any()  # some flipped, some not
    assert augment(torch.randn(16, 3, 48, 48), t1, 32).shape == (16, 3, 32, 32)


def test_prefetch_reraises_producer_errors() -> None:
    def items():
        yield 1
        raise OSError("disk gone")

    it = prefetch(items())
    assert next(it) == 1
    with pytest.raises(OSError, match="disk gone"):
        next(it)


def _batches(loader: str, folder: Path, rank: int = 0, world: int = 1):
    src = imagefolder_source(str(folder))
    cfg = DataConfig(source=f"imagefolder:{folder}", loader=loader, workers=1)
    pipe, _ = build_pipeline(src, cfg, seed=5, train_indices=np.arange(len(src.train)),
                             resolution=16, rank=rank, world=world)
    return list(pipe.train_batches(epoch=1, resolution=16, global_batch=50, start_step=0)), pipe


def test_cache_and_torch_loaders_agree_pixel_for_pixel(small_imagefolder: Path) -> None:
    cached, _ = _batches("cache", small_imagefolder)
    decoded, _ = _batches("torch", small_imagefolder)
    assert len(cached) == len(decoded) == 4
    for (xa, ya), (xb, yb) in zip(cached, decoded, strict=True):
        assert torch.equal(ya, yb)
        torch.testing.assert_close(xa, xb)


def test_sharded_batches_equal_the_single_process_batch(small_imagefolder: Path) -> None:
    single, _ = _batches("cache", small_imagefolder)
    shards = [_batches("cache", small_imagefolder, rank=r, world=2)[0] for r in range(2)]
    for step, (x, y) in enumerate(single):  # dealt in turn: image i to rank i mod 2
        torch.testing.assert_close(torch.stack([shards[0][step][0], shards[1][step][0]], dim=1).flatten(0, 1), x)
        assert torch.equal(torch.stack([shards[0][step][1], shards[1][step][1]], dim=1).flatten(), y)


def test_chunked_batches_equal_one_batch_at_a_time(small_imagefolder: Path, monkeypatch) -> None:
    """Small batches are gathered and augmented several at a time; each step's batch must be
    exactly the one a batch-at-a-time pipeline gives, a partial last chunk included."""
    batch_bytes = 50 * 16 * 16 * 3 * 4
    assert loaders.chunk_steps(50, 16, 3) >= 4  # the default takes the whole epoch at once
    monkeypatch.setattr(loaders, "CHUNK_BYTES", 3 * batch_bytes)  # chunks of 3 steps, then 1
    chunked, pipe = _batches("cache", small_imagefolder)
    monkeypatch.setattr(loaders, "CHUNK_BYTES", 0)
    single = list(pipe.train_batches(epoch=1, resolution=16, global_batch=50, start_step=0))
    assert len(chunked) == len(single) == 4
    for (xa, ya), (xb, yb) in zip(chunked, single, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


@pytest.mark.parametrize("loader", ["cache", "torch"])
def test_batches_come_in_the_runs_memory_format(small_imagefolder: Path, loader: str) -> None:
    nchw, pipe = _batches(loader, small_imagefolder)
    pipe.memory_format = torch.channels_last
    nhwc = list(pipe.train_batches(epoch=1, resolution=16, global_batch=50, start_step=0))
    assert all(x.is_contiguous() for x, _ in nchw)
    assert all(x.is_contiguous(memory_format=torch.channels_last) for x, _ in nhwc)
    for (xa, _), (xb, _) in zip(nchw, nhwc, strict=True):
        torch.testing.assert_close(xa, xb, rtol=0, atol=1e-5)
    val = next(iter(pipe.val_batches(16)))[0]
    assert val.is_contiguous(memory_format=torch.channels_last)


def test_resumed_epoch_starts_at_the_saved_step(small_imagefolder: Path) -> None:
    full, pipe = _batches("cache", small_imagefolder)
    tail = list(pipe.train_batches(epoch=1, resolution=16, global_batch=50, start_step=2))
    assert len(tail) == 2
    torch.testing.assert_close(tail[0][0], full[2][0])


def test_dali_shards_split_an_epoch_between_ranks(small_imagefolder: Path) -> None:
    """At world 2 each rank's DALI reader reads its own half of the images: the decoded images
    of the two ranks' epochs are disjoint and together are the whole training set."""
    import hashlib

    src = imagefolder_source(str(small_imagefolder))
    seen = []
    for rank in range(2):
        _, pipe = _batches("dali", small_imagefolder, rank=rank, world=2)
        iterator = pipe._iterator(16, 25)  # the reader's raw decoded images, before augmentation
        digests = set()
        for _ in range(len(src.train) // 50):
            images, _labels = pipe._next(iterator)
            digests |= {hashlib.sha1(img.cpu().numpy().tobytes()).hexdigest() for img in images}
        seen.append(digests)
    assert len(seen[0]) == len(seen[1]) == len(src.train) // 2
    assert not seen[0] & seen[1]


def test_dali_cpu_pipeline_decodes_real_jpegs(small_imagefolder: Path) -> None:
    batches, pipe = _batches("dali", small_imagefolder)
    assert type(pipe).__name__ == "DaliPipeline"
    assert len(batches) == 4
    x, y = batches[0]
    assert x.shape == (50, 3, 16, 16) and x.dtype == torch.float32
    assert y.dtype == torch.int64 and y.min() >= 0 and y.max() <= 4
    assert x.std() > 0.5  # normalised real images, not blank


@pytest.mark.parametrize("loader", ["torch", "dali"])
def test_streaming_loaders_never_build_the_decoded_cache(small_imagefolder: Path, tmp_path: Path, loader: str) -> None:
    """The torch and DALI loaders are chosen when the cache would not fit: they must not write it
    (for ImageNet, decoding every split at every phase resolution first would take hours)."""
    src = imagefolder_source(str(small_imagefolder))
    cache = tmp_path / "cache"
    cfg = DataConfig(source=f"imagefolder:{small_imagefolder}", loader=loader, workers=1, cache_dir=str(cache))
    pipe, _ = build_pipeline(src, cfg, seed=5, train_indices=np.arange(len(src.train)), resolution=16)
    pipe.prepare([8, 16])
    train = list(pipe.train_batches(epoch=0, resolution=16, global_batch=50))
    val = list(pipe.val_batches(16))
    assert len(train) == 4 and sum(len(y) for _, y in val) == len(src.val)
    assert not cache.exists() or not any(cache.rglob("*")), sorted(cache.rglob("*"))
    # the same validation images and statistics as the cache pipeline reads from its cache
    cached, _ = build_pipeline(src, DataConfig(source=cfg.source, loader="cache", cache_dir=str(tmp_path / "c2")),
                               seed=5, train_indices=np.arange(len(src.train)), resolution=16)
    for (xa, ya), (xb, yb) in zip(val, cached.val_batches(16), strict=True):
        assert torch.equal(ya, yb)
        torch.testing.assert_close(xa, xb)


def test_dali_decodes_the_same_pixels_as_the_cache_loader(small_imagefolder: Path) -> None:
    """At the images' own 32 px (no resize on either side) DALI's CPU decoder and the cache's PIL
    decoder see the same JPEGs: each image DALI reads equals the cache's decode of one file, up to
    the rounding of two IDCT implementations."""
    from tianfeng.trainers.data.decode import decode_file

    src = imagefolder_source(str(small_imagefolder))
    cfg = DataConfig(source=f"imagefolder:{small_imagefolder}", loader="dali", workers=1)
    pipe, _ = build_pipeline(src, cfg, seed=5, train_indices=np.arange(len(src.train)), resolution=32,
                             rank=0, world=1)
    reference = torch.from_numpy(np.stack([decode_file(f, 32, 3) for f in src.train.files])).int()  # N,H,W,C
    iterator = pipe._iterator(32, 25)
    worst = []
    matched = set()
    for _ in range(len(src.train) // 25):
        images, labels = pipe._next(iterator)
        for image, label in zip(images.cpu().int(), labels.tolist(), strict=True):
            assert image.shape == (32, 32, 3)
            distance = (reference - image).abs().flatten(1).max(dim=1).values
            nearest = int(distance.argmin())
            assert src.train.labels[nearest] == label  # the same file, not merely a similar image
            worst.append(int(distance[nearest]))
            matched.add(nearest)
    assert len(matched) == len(src.train)  # every file once
    assert max(worst) <= 3 and np.mean(worst) <= 1.5, (max(worst), np.mean(worst))


def test_a_corrupt_image_is_one_line_naming_the_file(small_imagefolder: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    import shutil

    from tianfeng.cli import main

    folder = tmp_path / "data"
    shutil.copytree(small_imagefolder, folder)
    victim = sorted((folder / "train").rglob("*.jpg"))[7]
    victim.write_bytes(victim.read_bytes()[:40])  # a JPEG cut short, as a failed copy leaves it
    code = main(["train", "--set", f"data.source=imagefolder:{folder}", "--set", "device=cpu",
                 "--set", f"run_dir={tmp_path / 'run'}", "--set", "data.loader=cache"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("tianfeng: error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert f"{victim}: cannot decode this image" in errors[0] and "remove or replace the file" in errors[0]
