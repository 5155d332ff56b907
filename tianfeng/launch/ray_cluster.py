"""Starting or joining Ray, shared by the Ray search backend and the Ray launch variant."""

from __future__ import annotations

import logging
import os
from typing import Any

from tianfeng.core.errors import ConfigError


def start_or_join(address: str | None, *, env: dict[str, str], log_to_driver: bool,
                  num_cpus: int | None = None) -> None:
    """Join the Ray cluster at `address`, or start one here when it is None. Workers get `env`
    and every TIANFENG_* variable of this process. A cluster that cannot be reached is a
    one-line error naming --address."""
    import ray

    if ray.is_initialized():
        return
    env = {k: v for k, v in os.environ.items() if k.startswith("TIANFENG_")} | env
    kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING,
                              "log_to_driver": log_to_driver, "runtime_env": {"env_vars": env}}
    if address is None:
        kwargs["object_store_memory"] = 256 * 2**20  # only configs and metrics travel through it
        if num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError) as exc:
        raise ConfigError("--address", "", f"cannot join the Ray cluster at {address!r}: "
                          f"{str(exc).splitlines()[0]}") from None
