"""The space file a study was created from, kept in the study itself (so promote, report and
resume need no copy of it) as a system attribute: user attributes are what `optuna studies` and
the dashboard list, and a whole YAML file there drowns them. Studies made before keep theirs in
the user attribute `space_yaml`, still read."""

from __future__ import annotations

import optuna

from tianfeng.hpo.optuna_private import storage_of, study_id
from tianfeng.storage.study_attrs import StudyKey

SPACE_ATTR = "tianfeng:space_yaml"


def store_space_text(study: optuna.Study, text: str) -> None:
    # Optuna 5 keeps study system attributes on the storage only (as optuna-dashboard reads them)
    storage_of(study).set_study_system_attr(study_id(study), SPACE_ATTR, text)


def space_text(study: optuna.Study) -> str | None:
    stored = storage_of(study).get_study_system_attrs(study_id(study)).get(SPACE_ATTR)
    return stored if stored is not None else study.user_attrs.get(StudyKey.SPACE_YAML)
