"""Telling a region slot's owner alive when its lock is free (`nodeagent.region.Liveness`): the
owner is a PID namespace, a pid in it and a start time, found in /proc (here a /proc tree as the
kernel lays it out) once, then checked where it was found, tick after tick."""

from __future__ import annotations

from pathlib import Path

from nodeagent import region


def _process(proc: Path, pid: int, inner: int, start: int, state: str = "S") -> int:
    """/proc/<pid> of a process that is `inner` in its namespace; returns the namespace's inode
    (a file here; the kernel's is a link whose target's inode `os.stat` reads)."""
    entry = proc / str(pid)
    (entry / "ns").mkdir(parents=True, exist_ok=True)
    rest = " ".join([state, *["0"] * 18, str(start), "0"])
    (entry / "stat").write_text(f"{pid} (x) {rest}\n")
    (entry / "status").write_text(f"Name:\tx\nNSpid:\t{pid}\t{inner}\n")
    (entry / "ns" / "pid").touch()
    return (entry / "ns" / "pid").stat().st_ino


def test_an_owner_found_once_is_checked_again_where_it_was_found(tmp_path) -> None:
    proc = tmp_path / "proc"
    ns = _process(proc, 500, inner=12, start=77)
    _process(proc, 501, inner=13, start=78)
    alive = region.Liveness(str(proc))
    alive.tick()
    assert alive.alive(12, ns, 77)
    assert not alive.alive(12, ns, 99)  # same pid, another start time: not this slot's owner
    alive.tick()
    assert alive.alive(12, ns, 77)
    # pid 500 exits and the kernel hands its pid to a new process: the slot's owner is gone
    _process(proc, 500, inner=12, start=4242)
    alive.tick()
    assert not alive.alive(12, ns, 77)


def test_an_exited_owner_is_dead_and_an_unreadable_namespace_matches_any(tmp_path) -> None:
    proc = tmp_path / "proc"
    ns = _process(proc, 600, inner=600, start=5)
    alive = region.Liveness(str(proc))
    alive.tick()
    assert alive.alive(600, ns, 5)
    _process(proc, 600, inner=600, start=5, state="Z")  # a zombie: its memory is given back
    alive.tick()
    assert not alive.alive(600, ns, 5)
    (proc / "600" / "ns" / "pid").unlink()  # a namespace the agent may not read
    _process(proc, 601, inner=9, start=6)
    (proc / "601" / "ns" / "pid").unlink()
    alive.tick()
    assert alive.alive(9, 123456, 6)  # never declared dead for want of reading its namespace


def test_a_zombie_leader_is_alive_while_another_thread_runs(tmp_path) -> None:
    """The leader left by SYS_exit ("Z") while a second thread keeps the process, its region
    lock and its device memory: the slot is not dead. Once every thread has exited, it is."""
    proc = tmp_path / "proc"
    ns = _process(proc, 700, inner=700, start=8, state="Z")
    (proc / "700" / "task" / "700").mkdir(parents=True)
    (proc / "700" / "task" / "700" / "stat").write_text("700 (x) Z 1\n")
    (proc / "700" / "task" / "701").mkdir()
    (proc / "700" / "task" / "701" / "stat").write_text("701 (x) S 1\n")
    alive = region.Liveness(str(proc))
    alive.tick()
    assert alive.alive(700, ns, 8)
    (proc / "700" / "task" / "701" / "stat").write_text("701 (x) Z 1\n")
    alive.tick()
    assert not alive.alive(700, ns, 8)
