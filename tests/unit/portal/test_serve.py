"""The portal's server command (portal/serve.py): process count, argv, Prometheus folder."""

from __future__ import annotations

import pytest

from portal import serve


def test_the_process_count_follows_the_cgroup_limit_then_the_cores(tmp_path, monkeypatch):
    monkeypatch.delenv("TRANCHE_PORTAL_PROCESSES", raising=False)
    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")
    assert serve.cgroup_cpus(limit) == 2  # 1.5 CPUs: rounded up
    limit.write_text("max 100000\n")
    assert serve.cgroup_cpus(limit) is None
    assert serve.cgroup_cpus(tmp_path / "missing") is None
    monkeypatch.setattr(serve, "cgroup_cpus", lambda: 1)
    assert serve.default_processes() == 1  # a 1-CPU pod on a bigger node: one process
    monkeypatch.setattr(serve, "cgroup_cpus", lambda: None)
    assert serve.default_processes() == len(__import__("os").sched_getaffinity(0))


def test_the_environment_sets_the_count_and_refuses_zero(monkeypatch):
    monkeypatch.setenv("TRANCHE_PORTAL_PROCESSES", "3")
    assert serve.default_processes() == 3
    monkeypatch.setenv("TRANCHE_PORTAL_PROCESSES", "0")
    with pytest.raises(SystemExit, match="give 1 or more"):
        serve.default_processes()


def test_argv_names_port_role_and_processes():
    assert serve.argv(8123) == [
        "-m", "portal.serve", "--host", "127.0.0.1", "--port", "8123", "--role", "pages",
    ]  # fmt: skip
    argv = serve.argv(8124, host="0.0.0.0", processes=1, role="ingest")  # noqa: S104
    assert argv[argv.index("--role") + 1] == "ingest"
    assert argv[argv.index("--processes") + 1] == "1"


def test_the_prometheus_folder_is_emptied_before_the_processes_start(tmp_path, monkeypatch):
    folder = tmp_path / "prom"
    folder.mkdir()
    (folder / "counter_123.db").write_bytes(b"a dead process's counts")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))
    assert serve.reset_multiproc_dir() == folder
    assert folder.is_dir()
    assert not list(folder.iterdir())
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    assert serve.reset_multiproc_dir() is None
