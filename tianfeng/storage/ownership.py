"""Which study a run folder or a report belongs to. Each study gets an id when it is created; its
run folder (<runs_dir>/<study>/) holds a mark with that id and its report carries it in a meta
tag. Both are checked before anything is written, so a second study of the same name (in
another database, or created again after the first was deleted) never overwrites the first
one's trials, checkpoints or report: the command refuses in one line instead."""

from __future__ import annotations

import html
import json
import re
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from tianfeng.core.errors import ConfigError
from tianfeng.core.files import write_whole
from tianfeng.storage.study_attrs import StudyKey

MARK = ".tianfeng-owner.json"
_META = re.compile(r'<meta name="tianfeng-owner" content="([^"]*)"')


@dataclass(frozen=True)
class Owner:
    uid: str
    study: str
    storage: str  # for messages only, password hidden

    def meta_tag(self) -> str:
        return f'<meta name="tianfeng-owner" content="{html.escape(json.dumps(asdict(self)))}">'


def new_uid() -> str:
    return uuid.uuid4().hex


def study_owner(study, storage: str) -> Owner:
    """The owner a study's folder and report are marked with. Studies made before ids existed
    are known by name and creation time."""
    attrs = study.user_attrs
    uid = attrs.get(StudyKey.UID) or f"{study.study_name}@{attrs.get(StudyKey.CREATED, '')}"
    return Owner(uid, study.study_name, shown_storage(storage))


def shown_storage(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL: shown as given (it was checked elsewhere)
        return url


def _read_mark(folder: Path) -> Owner | None:
    try:
        return Owner(**json.loads((folder / MARK).read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return Owner("?", "?", "an unreadable owner mark")


def check_folder(folder: Path, owner: Owner | None, flag: str = "--runs-dir") -> None:
    """Refuse `folder` if it belongs to another study. `owner` None: a study not created yet,
    which may only start in a folder that is absent or empty."""
    mark = _read_mark(folder)
    if mark is not None:
        if owner is not None and mark.uid == owner.uid:
            return
        raise ConfigError(flag, "", f"{folder} holds the runs of study {mark.study} in {mark.storage}; "
                          "give this study another --study name or --runs-dir (or delete the folder "
                          "if that study is gone)")
    if owner is None and folder.is_dir() and any(folder.iterdir()):
        raise ConfigError(flag, "", f"{folder} already holds runs of another study; give this study "
                          "another --study name or --runs-dir (or delete the folder if they are not needed)")


def claim_folder(folder: Path, owner: Owner, flag: str = "--runs-dir") -> None:
    """Check `folder`, then mark it as `owner`'s (a folder of a study made before marks is adopted)."""
    check_folder(folder, owner, flag)
    if _read_mark(folder) is None:
        folder.mkdir(parents=True, exist_ok=True)
        write_whole(folder / MARK, json.dumps(asdict(owner)))


def report_owner(path: Path) -> Owner | None:
    """The owner written into an existing report, or None (no file, or a report without one)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(8192)
    except (FileNotFoundError, IsADirectoryError):
        return None
    match = _META.search(head)
    if not match:
        return None
    try:
        return Owner(**json.loads(html.unescape(match.group(1))))
    except (ValueError, TypeError):
        return Owner("?", "?", "an unreadable owner tag")


def check_report(path: Path, owner: Owner | None, flag: str = "--output") -> None:
    """Refuse to overwrite a report of another study (`owner` None: a study not created yet)."""
    existing = report_owner(path)
    if existing is None and not path.exists():
        return
    if existing is not None and owner is not None and existing.uid == owner.uid:
        return
    if existing is None and owner is not None:
        return  # a report written before owner tags: it is this study's own report by its name
    who = f"study {existing.study} in {existing.storage}" if existing else "another study"
    raise ConfigError(flag, "", f"{path} is the report of {who}; give this study another --study name "
                      "or write its report elsewhere with -o (or delete the file if that study is gone)")


def default_report_path(name: str) -> Path:
    """Where a study's (or a scale study's) report goes unless -o says otherwise."""
    return Path("reports") / f"{name}.html"


def check_report_of(storage: str, study_name: str, path: Path) -> None:
    """Before a command that ends by writing `study_name`'s report to `path`: refuse now if
    that file is another study's report, not after the work is done."""
    if not path.exists():  # nothing to collide with; and opening the storage would create it
        return
    import optuna
    from sqlalchemy.engine import make_url

    url = make_url(storage)
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").exists():
        check_report(path, None)  # no database yet, so no study: do not create one to learn that
        return
    storage_obj = optuna.storages.get_storage(storage)
    exists = study_name in {s.study_name for s in storage_obj.get_all_studies()}
    owner = study_owner(optuna.load_study(study_name=study_name, storage=storage_obj), storage) if exists else None
    check_report(path, owner)


def write_report(path: Path, page: str, owner: Owner, flag: str = "--output") -> Path:
    """Write a report page marked as `owner`'s, unless `path` is another study's report."""
    check_report(path, owner, flag)
    head = '<meta charset="utf-8">'
    if head not in page:
        raise ValueError("a report template must start its head with " + head)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the workers of a job array write their study's report at the same moment
    return write_whole(path, page.replace(head, head + "\n" + owner.meta_tag(), 1))
