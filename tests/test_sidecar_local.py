"""The local scaler really starts and stops processes; the file lease elects one leader."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.leader import FileLease, LockDirError, ensure_private_dir
from sidecar.scalers.local import HEALTHY_RUN_S, LocalScaler, _Crashes
from tests.sdk_helpers import wait_until

ROOT = Path(__file__).parent.parent


def scaler_for(
    folder: Path, *extra: str, stop_timeout_s: float = 30.0, racks: tuple[str, ...] = ()
) -> LocalScaler:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AUTOSCALER_CLIENT_RACK", None)
    return LocalScaler(
        [sys.executable, "-m", "tests.fake_consumer", str(folder), *extra],
        identity_prefix="sink",
        env=env,
        stop_timeout_s=stop_timeout_s,
        racks=racks,
    )


def started(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.started")}


def stopped(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.stopped")}


def test_scale_up_and_down_by_ordinal(tmp_path: Path) -> None:
    scaler = scaler_for(tmp_path)
    try:
        scaler.scale(3)
        assert wait_until(lambda: started(tmp_path) == {"sink-0", "sink-1", "sink-2"})
        assert scaler.replicas() == 3
        scaler.scale(1)  # the highest ordinals go, each by SIGTERM, without waiting here
        assert scaler.replicas() == 1
        assert wait_until(lambda: stopped(tmp_path) == {"sink-1", "sink-2"})
        assert wait_until(lambda: scaler.running_count() == 1 and not scaler.stopping)
        scaler.scale(2)  # the lowest free ordinal comes back
        assert sorted(scaler.processes) == [0, 1]
    finally:
        scaler.close()
    assert scaler.replicas() == 0


def test_consumers_get_racks_by_ordinal_in_turn(tmp_path: Path) -> None:
    scaler = scaler_for(tmp_path, racks=("a", "b"))
    try:
        scaler.scale(3)
        assert wait_until(lambda: len(list(tmp_path.glob("*.rack"))) == 3)
    finally:
        scaler.close()
    racks = {p.stem: p.read_text() for p in tmp_path.glob("*.rack")}
    assert racks == {"sink-0": "a", "sink-1": "b", "sink-2": "a"}
    plain = tmp_path / "plain"
    plain.mkdir()
    scaler = scaler_for(plain)
    try:
        scaler.scale(1)
        assert wait_until(lambda: started(plain) == {"sink-0"})
    finally:
        scaler.close()
    assert not list(plain.glob("*.rack"))


def test_a_crashed_consumer_is_noticed_and_restarted_after_its_back_off(tmp_path: Path) -> None:
    clock = FakeClock()
    scaler = scaler_for(tmp_path)
    scaler.clock = clock
    try:
        scaler.scale(2)
        assert wait_until(lambda: len(started(tmp_path)) == 2)
        crashed = scaler.processes[1]
        os.kill(crashed.pid, signal.SIGKILL)
        crashed.wait(30)
        # Still asked for (as a Deployment keeps its replicas), not running: backing off.
        assert scaler.replicas() == 2 and scaler.running_count() == 1
        assert 1 not in scaler.processes
        clock.now = scaler.crashes[1].next_start
        # No scale-up asked for: the count it was given is kept, as a Deployment keeps it.
        assert scaler.running_count() == 2 and scaler.processes[1].pid != crashed.pid
    finally:
        scaler.close()


def test_consumer_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    scaler = scaler_for(tmp_path, "--ignore-sigterm", stop_timeout_s=0.5)
    scaler.scale(1)
    assert wait_until(lambda: len(started(tmp_path)) == 1)
    process = scaler.processes[0]
    scaler.scale(0)
    assert process.poll() is None  # scale() did not wait for it: the sidecar's loop goes on
    assert wait_until(lambda: scaler.running_count() == 0 and not scaler.stopping)
    assert process.returncode == -signal.SIGKILL
    assert stopped(tmp_path) == set()


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_crash_looping_consumer_backs_off_and_is_reported(tmp_path: Path) -> None:
    clock = FakeClock()
    scaler = LocalScaler(
        [sys.executable, "-c", "import sys; sys.exit(2)"], identity_prefix="sink", clock=clock
    )
    starts = 0
    for crash in range(1, 4):
        scaler.scale(1)
        starts += 1
        process = scaler.processes[0]
        process.wait(30)
        assert scaler.running_count() == 0 and scaler.replicas() == 1
        assert scaler.crashes[0].count == crash
        scaler.scale(1)  # within the back-off: not started again
        assert not scaler.processes
        clock.now = scaler.crashes[0].next_start  # the back-off doubles: 1, 2, 4 s
    assert starts == 3
    assert scaler.crash_looping() == [0]
    [problem] = scaler.problems()
    assert "sink-0 is crash-looping: exited 3 times in a row (last exit code 2)" in problem


def test_a_long_healthy_run_forgives_earlier_crashes(tmp_path: Path) -> None:
    clock = FakeClock()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    scaler = LocalScaler(
        [sys.executable, "-m", "tests.fake_consumer", str(tmp_path)],
        identity_prefix="sink",
        env=env,
        clock=clock,
    )
    try:
        scaler.crashes[0] = _Crashes(count=5, last_code=1, next_start=clock.now)
        scaler.scale(1)
        assert scaler.crash_looping() == [0]
        clock.now += HEALTHY_RUN_S
        assert scaler.replicas() == 1
        assert scaler.crash_looping() == [] and scaler.problems() == []
    finally:
        scaler.close()


def test_bad_scale_requests(tmp_path: Path) -> None:
    scaler = scaler_for(tmp_path)
    with pytest.raises(ValueError, match=r"replicas must be in \[0, 64\]"):
        scaler.scale(65)
    with pytest.raises(ValueError, match="command must name"):
        LocalScaler([])


def test_file_lease_admits_one_holder(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "sidecar.lock"
    first, second = FileLease(path), FileLease(path)
    assert first.acquire() and first.held
    assert not second.acquire()
    first.release()
    assert second.acquire()
    second.release()


def test_file_lease_is_freed_when_the_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from sidecar.leader import FileLease;"
            f"assert FileLease(Path({str(path)!r})).acquire(); print('held', flush=True);"
            "time.sleep(60)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        lease = FileLease(path)
        assert not lease.acquire()
        holder.kill()
        holder.wait(10)
        assert lease.acquire()
        lease.release()
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_consumer_that_exits_is_failing_in_its_own_words_until_it_restarts(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "fixed"
    program = (
        "import pathlib, sys, time\n"
        f"if not pathlib.Path({str(flag)!r}).exists():\n"
        "    print('starting', file=sys.stderr)\n"
        "    print('sink: cannot start: no table', file=sys.stderr)\n"
        "    sys.exit(3)\n"
        "time.sleep(600)\n"
    )
    scaler = LocalScaler([sys.executable, "-c", program], identity_prefix="sink")
    try:
        scaler.scale(1)
        assert wait_until(lambda: scaler.running_count() == 0)  # exited
        (failure,) = scaler.failing_members()
        assert failure.member == "sink-0"
        assert failure.reason.startswith("exited with 3 after ")
        assert failure.reason.endswith("(1 in a row): sink: cannot start: no table")
        flag.touch()  # fixed: the restart after the back-off runs, and fails no more
        assert wait_until(lambda: scaler.running_count() == 1, timeout_s=10)
        assert scaler.failing_members() == []
    finally:
        scaler.close()


def test_the_lock_is_never_opened_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not ours to write\n")
    link = tmp_path / "g.lock"
    link.symlink_to(target)
    with pytest.raises(OSError):
        FileLease(link).acquire()
    assert target.read_text() == "not ours to write\n"
    own = FileLease(tmp_path / "own.lock")
    assert own.acquire()
    assert (tmp_path / "own.lock").stat().st_mode & 0o077 == 0  # others read nothing
    own.release()


def test_a_lock_directory_that_is_not_ours_alone_is_one_line(tmp_path: Path) -> None:
    private = tmp_path / "locks"
    ensure_private_dir(private)
    assert private.stat().st_mode & 0o777 == 0o700
    ensure_private_dir(private)  # again: ours already
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(LockDirError, match=r"is writable by others \(mode 777\).*--lock-file"):
        ensure_private_dir(shared)
    link = tmp_path / "link"
    link.symlink_to(private)
    with pytest.raises(LockDirError, match="is not a directory"):
        ensure_private_dir(link)


def test_a_running_consumer_is_named_by_its_last_stderr_line(tmp_path: Path) -> None:
    program = (
        "import sys, time\nprint('SASL authentication failed', file=sys.stderr)\ntime.sleep(600)\n"
    )
    scaler = LocalScaler([sys.executable, "-c", program], identity_prefix="sink")
    try:
        scaler.scale(1)
        assert wait_until(lambda: bool(scaler.member_words()))
        (said,) = scaler.member_words()
        assert said.member == "sink-0"
        assert said.reason == "running, last said: SASL authentication failed"
        assert scaler.failing_members() == []  # running: not failing
    finally:
        scaler.close()
