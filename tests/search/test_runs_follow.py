"""`tianfeng runs --follow RUN`: a promoted run's epochs streamed once each while it trains, and
the run's end (here a Ctrl-C to the promoting process) ending the following with its status."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.distributed.submitted_runs import searched_study
from tianfeng.storage.runs import RunStore


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.Popen([sys.executable, "-m", "tianfeng.cli", *args], text=True, **pipes)


def test_following_a_run_streams_each_epoch_once_and_ends_with_the_run(tmp_path: Path) -> None:
    storage = f"sqlite:///{searched_study(tmp_path)}"
    promoting = _cli("promote", "0", "--study", "s", "--storage", storage, "--runs-dir", str(tmp_path / "runs"),
                     "--set", "phases.0.epochs=500", env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=tmp_path,
                     # to a file: a pipe nobody reads fills with the run's log and blocks it
                     stdout=subprocess.DEVNULL, stderr=(tmp_path / "promote.log").open("w"))
    try:
        deadline = time.monotonic() + 300
        while not RunStore(storage).runs() and time.monotonic() < deadline:
            time.sleep(0.2)
        run_id = RunStore(storage).runs()[0]["id"]
        follower = _cli("runs", "--storage", storage, "--follow", str(run_id), "--json", "--interval", "0.2", cwd=tmp_path)
        events = []
        while len([e for e in events if e["event"] == "epoch"]) < 3:  # read while the run trains
            line = follower.stdout.readline()
            assert line, follower.stderr.read()[-2000:]
            events.append(json.loads(line))
        promoting.send_signal(signal.SIGINT)  # the run ends (interrupted); the follower sees it
        promoting.wait(timeout=120)
        follower.wait(timeout=120)
        rest, err = follower.stdout.read(), follower.stderr.read()  # through the buffer readline filled
    finally:
        promoting.kill()
    events += [json.loads(line) for line in rest.splitlines()]
    epochs = [e["epoch"] for e in events if e["event"] == "epoch"]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) < 500  # each once, in order
    assert any(e["event"] == "state" and e["status"] == "running" for e in events)  # seen while training
    assert events[-1]["event"] == "ended" and events[-1]["status"] == "interrupted", events[-1]
    assert len(events[-1]["epochs"]) == len(epochs)
    assert follower.returncode == 1 and f"run {run_id} interrupted" in err


def test_following_an_unknown_run_is_one_line(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'runs.db'}"
    RunStore(storage)  # a database with no runs
    out = subprocess.run([sys.executable, "-m", "tianfeng.cli", "runs", "--storage", storage, "--follow", "7"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "--follow: no run 7 in this database" in out.stderr
