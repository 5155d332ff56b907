"""torch.compile of the training model, on when it pays.

A compiled step is faster (measured on this CPU: 1.2-1.4x for resnet_small, more on GPUs where it
fuses BatchNorm and activations), but the first compile of a shape costs 11-26 s here, longer
than a whole low-resolution proxy trial. So `auto` trains the first steps eagerly, times them,
and compiles only when the steps left would save more than the compile is expected to cost:

    saving = steps left x eager step x (1 - 1 / speedup)  >  MARGIN x compile seconds x shapes left

`speedup` and `compile seconds` come from earlier compiled runs on this machine (kept in
$TIANFENG_CACHE/compile.json per device, model, precision, layout, world size, threads, torch
version and shape),
or from the priors below until there are some. Inductor's own caches go to
$TIANFENG_CACHE/inductor, so a later run or process with the same shapes loads the compiled
kernels instead of building them (here: 1-2 s instead of 20).
"""

from __future__ import annotations

import logging
import os
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from tianfeng.trainers.quiet_builder import quiet_extension_builder
from tianfeng.trainers.shared_files import read_json, update_json

log = logging.getLogger("tianfeng.engine")

EAGER_STEPS = 8  # timed eagerly before `auto` decides (after WARMUP_STEPS untimed ones)
WARMUP_STEPS = 2
COMPILED_STEPS = 8  # timed after the compile, to record the speedup it gave
MARGIN = 1.5  # the saving must beat the compile by this much: its speedup is a guess until measured
PRIOR_SPEEDUP = {"cpu": 1.2, "cuda": 1.3}
PRIOR_COMPILE_S = {"cpu": 30.0, "cuda": 60.0}  # a first compile, caches empty
# a shape compiled before, its kernels in inductor's cache: measured here 0.3-2 s against 20
PRIOR_WARM_S = 3.0
# at least this, whatever was recorded: a run that compiled a shape its process had compiled
# already (trials in one search worker) records ~0 s, which a new process does not get
MIN_WARM_S = 1.0


def use_cache_dir(cache_dir: Path) -> None:
    """Inductor's caches (FX graphs, kernels, Triton's) under the tianfeng cache, unless the
    user pointed TORCHINDUCTOR_CACHE_DIR elsewhere. Torch writes its default into the variable
    the first time it asks (importing torch._dynamo can), so that value counts as unset."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if current is None or os.path.abspath(current) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str((cache_dir / "inductor").resolve())


def compile_model(model: nn.Module, mode: str) -> nn.Module:
    if not torch.cuda.is_available():
        quiet_extension_builder()  # inductor's CPU path imports it
    return torch.compile(model, mode=None if mode == "default" else mode)


@dataclass(frozen=True)
class Record:
    compile_s: float  # first compiled step minus a compiled one
    speedup: float  # eager step time / compiled step time


class CompileRecords:
    """Measured compile costs and speedups, shared by runs and processes through one JSON file."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = cache_dir / "compile.json"

    def read(self) -> dict[str, dict[str, dict]]:
        """model key -> shape -> {speedup, compiles, cold_s, warm_s (after a second compile)}"""
        return read_json(self.path)

    def write(self, model_key: str, shape: str, record: Record) -> None:
        def add(known: dict) -> None:
            shapes = known.setdefault(model_key, {})
            before = shapes.get(shape)
            entry = {"speedup": round(record.speedup, 4), "compiles": 1 + (before or {}).get("compiles", 0)}
            # the first compile of a shape builds its kernels; later ones mostly load them
            entry["cold_s"] = before["cold_s"] if before else round(record.compile_s, 3)
            if before:
                entry["warm_s"] = round(record.compile_s, 3)
            shapes[shape] = entry

        try:
            update_json(self.path, add)
        except OSError as exc:
            log.warning("cannot keep the compile measurement in %s: %s", self.path, exc)


def model_key(device: torch.device, parts: tuple) -> str:
    """What a compile's cost and gain depend on besides the input shape."""
    return ":".join(map(str, (device.type, *parts, torch.get_num_threads(), torch.__version__)))


def shape_key(resolution: int, batch: int) -> str:
    return f"{resolution}px x {batch}"


@dataclass(frozen=True)
class Estimate:
    speedup: float
    compile_s: float  # per shape
    source: str  # where the figures came from, for the log


def estimate(shapes: dict[str, dict], shape: str, device: torch.device) -> Estimate:
    """From the records of this model (`shapes`: shape -> record): this shape's own if it has
    one (its kernels are then in inductor's cache: its warm compile time, once measured); else
    the model's at other shapes (a new shape compiles afresh: their slowest first compile); else
    the priors."""
    if shape in shapes:
        r = shapes[shape]
        warm = max(MIN_WARM_S, r.get("warm_s", min(r["cold_s"], PRIOR_WARM_S)))
        return Estimate(r["speedup"], warm, "measured at this shape before, its kernels cached")
    if shapes:
        return Estimate(statistics.median(r["speedup"] for r in shapes.values()),
                        max(r["cold_s"] for r in shapes.values()), f"measured at {len(shapes)} other shape(s)")
    return Estimate(PRIOR_SPEEDUP.get(device.type, 1.2), PRIOR_COMPILE_S.get(device.type, 60.0), "priors")


def pays(eager_step_s: float, steps_left: int, shapes_left: list[str], shapes: dict[str, dict],
         device: torch.device) -> tuple[bool, str]:
    """Whether compiling now pays for itself over the rest of the run, and the sentence why.
    `shapes_left`: the shape of this phase, then those of the phases after it (each compiles)."""
    now = estimate(shapes, shapes_left[0], device)
    cost = sum(estimate(shapes, s, device).compile_s for s in dict.fromkeys(shapes_left))
    saving = steps_left * eager_step_s * (1 - 1 / now.speedup) if now.speedup > 0 else 0.0
    verdict = saving > MARGIN * cost
    why = (f"{steps_left} steps left at {1000 * eager_step_s:.1f} ms would save ~{saving:.1f} s at "
           f"{now.speedup:.2f}x; compiling {len(set(shapes_left))} shape(s) costs ~{cost:.1f} s; {now.source}")
    return verdict, why


class StepTimer:
    """Wall time of single steps; on a GPU it synchronizes, so it is used only while deciding."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.times: list[float] = []

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def median(self) -> float:
        return statistics.median(self.times) if self.times else 0.0


class CompilePolicy:
    """Which module the training steps call, eager or compiled, for engine.compile auto|on|off.

    auto: WARMUP_STEPS untimed eager steps, EAGER_STEPS timed ones, then one decision (rank 0's,
    shared with every rank: compiled DDP must run the same graphs everywhere); when it compiles,
    the first compiled step and COMPILED_STEPS more are timed and recorded for later runs."""

    def __init__(self, setting: str, mode: str, train_model: nn.Module, device: torch.device, *,
                 is_main: bool, share, cache_dir: Path, model_key: str) -> None:
        self.setting, self.mode, self.device = setting, mode, device
        self.eager = train_model
        self.model = compile_model(train_model, mode) if setting == "on" else train_model
        self.is_main, self.share = is_main, share
        self.records = CompileRecords(cache_dir)
        self.model_key = model_key
        self.shape = ""
        self.timer = StepTimer(device)
        self.state = "eager" if setting == "auto" else "done"
        self.seen = 0
        self.eager_step_s = 0.0
        self._compiled: set[tuple[int, tuple[int, ...]]] = set()  # (compiled module, batch shape) stepped
        if setting == "on" and is_main:
            log.info("compile on (as configured, mode %s)", mode)

    @property
    def timing(self) -> bool:
        return self.state != "done"

    def compiles(self, shape: tuple[int, ...]) -> bool:
        """Whether a step on a batch of this shape compiles first (its first compiled step)."""
        return self.model is not self.eager and (id(self.model), shape) not in self._compiled

    def compiled(self, shape: tuple[int, ...]) -> None:
        self._compiled.add((id(self.model), shape))

    def step_done(self, seconds: float, *, timed: bool, steps_left: int, shapes_left: list[str]) -> None:
        """After a step: its seconds (synchronized while `timing`), whether it was an ordinary
        one (not a noise-scale step), the steps after it and the shapes they run at."""
        if self.state == "done":
            return
        self.seen += 1
        if self.state == "eager":
            if timed and self.seen > WARMUP_STEPS:
                self.timer.times.append(seconds)
            if len(self.timer.times) >= EAGER_STEPS:
                self._decide(steps_left, shapes_left)
        elif shapes_left[0] != self.shape:  # a new phase before the measurement ended: not recorded
            self.state = "done"
        elif self.state == "first_compiled" and timed:
            self.first_compiled_s = seconds
            self.timer.times, self.state = [], "compiled"
        elif self.state == "compiled" and timed:
            self.timer.times.append(seconds)
            if len(self.timer.times) >= COMPILED_STEPS:
                self._record()

    def _decide(self, steps_left: int, shapes_left: list[str]) -> None:
        self.eager_step_s = self.timer.median()
        self.shape = shapes_left[0]
        verdict = False
        if self.is_main:
            shapes = self.records.read().get(self.model_key, {})
            verdict, why = pays(self.eager_step_s, steps_left, shapes_left, shapes, self.device)
            log.info("compile auto: %s (%s)", "on" if verdict else "off", why)
        verdict = self.share(verdict)
        if verdict:
            self.model = compile_model(self.eager, self.mode)
            self.state = "first_compiled"
        else:
            self.state = "done"

    def _record(self) -> None:
        compiled = self.timer.median()
        speedup = self.eager_step_s / compiled if compiled > 0 else 0.0
        compile_s = max(0.0, self.first_compiled_s - compiled)
        self.state = "done"
        if self.is_main:
            self.records.write(self.model_key, self.shape, Record(compile_s, speedup))
            log.info("compile: %.1f s to compile, step %.1f -> %.1f ms (%.2fx)", compile_s,
                     1000 * self.eager_step_s, 1000 * compiled, speedup)
        # a compile that came out slower than eager (the estimate was wrong for this model) is
        # dropped for the rest of the run; rank 0's measurement decides for every rank
        if self.share(speedup < 1.0):
            self.model = self.eager
            if self.is_main:
                log.info("compile auto: the compiled step is slower here (%.2fx): eager for the rest of the run",
                         speedup)
