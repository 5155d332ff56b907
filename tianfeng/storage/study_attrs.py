"""The attributes tianfeng keeps on each Optuna study, every key named once here (Optuna stores
them as JSON beside the study). Read them as `study.user_attrs.get(StudyKey.METRIC)`: a
`StudyKey` is the string it names. The trials' own attributes are `tianfeng.hpo.trial_attrs`."""

from __future__ import annotations

from enum import StrEnum


class StudyKey(StrEnum):
    KIND = "kind"  # search
    SPACE_PATH = "space_path"  # the space file it was created from, as given
    SPACE_FORMAT = "space_format"  # the stored space's format (hpo.running.budget)
    SPACE_YAML = "space_yaml"  # the space's text, where studies made before system attributes kept it
    OBJECTIVE_MODE = "objective_mode"  # a defaults.ObjectiveMode
    DIRECTION = "direction"  # maximize or minimize: the metric's
    METRIC = "metric"  # the metric trials are scored by (val_top1)
    TARGET = "target"  # time-to-target: the metric level a recipe must reach
    MIN_ACCURACY = "min_accuracy"  # pareto: the floor a front trial must reach
    CHANCE = "chance"  # pareto with the default floor: the metric's chance level, which the floor rises from
    CLUSTER = "cluster"  # the target cluster, described in words
    PER_GPU_BATCH = "per_gpu_batch"  # the per-GPU batch range on the target cluster, in words
    GPUS = "gpus"
    GPUS_PER_NODE = "gpus_per_node"
    PROFILE = "profile"  # the measured throughput profile the cluster predicts with (--profile), if one
    DATA = "data"  # the data source the trials train on
    RUNG = "rung"  # the fidelity its trials run at
    SAMPLER = "sampler"
    PRUNER = "pruner"
    RUNS_ROOT = "runs_root"  # the folder below which each trial's run directory is
    CREATED = "created"  # local time, as text
    UID = "uid"  # the id its run folder and report are marked with (storage.ownership)
    TRIAL_BUDGET = "trial_budget"  # the trials the latest search start was given
    WORKERS_JOB = "workers_job"  # a submitted search's job: {launcher, job, workers, script, log_dir}
    CALIBRATION = "calibration"  # tianfeng calibrate's result: the proxy-to-full rank correlation
    SCALE = "scale"  # the scale study it belongs to (tianfeng scale)
    BATCH_SIZE = "batch_size"  # its batch size in that scale study
    ROLE = "role"  # search or naive, in that scale study
