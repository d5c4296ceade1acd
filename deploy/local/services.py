"""Project-owned PostgreSQL and Redis instances for local runs and tests.

`up()` is idempotent: an instance already running is left alone, and a data folder already
initialised is reused. Secrets are generated once into `.state/secrets/` (mode 0600), where the
portal's settings find them. PostgreSQL refuses to run as root, so as root it runs as the
`postgres` system user (the data folder is handed to that user).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from glob import glob
from pathlib import Path

from deploy.supervisor import read_pid, stop_pid, wait_until

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Layout:
    state: Path
    pg_port: int
    redis_port: int
    pg_root: Path

    @property
    def secrets(self) -> Path:
        return self.state / "secrets"

    @property
    def pg_data(self) -> Path:
        return self.pg_root / "data"

    @property
    def pg_log(self) -> Path:
        """Beside the other logs, unless PostgreSQL had to move out of the state folder."""
        if self.pg_root == self.state / "pg":
            return self.state / "logs" / "postgres.log"
        return self.pg_root / "postgres.log"

    @property
    def redis_dir(self) -> Path:
        return self.state / "redis"


def _pg_root(state: Path) -> Path:
    """Where PostgreSQL keeps its data: `<state>/pg`, unless (as root) the `postgres` user cannot
    reach that folder, e.g. a clone under /root; then a folder of this checkout's own under
    /var/tmp, so `make test` still works there instead of failing on a permission."""
    default = state / "pg"
    if os.geteuid() != 0:
        return default
    existing = next(p for p in (state, *state.parents) if p.exists())
    probe = subprocess.run(
        _as_pg_user(["test", "-x", str(existing)]), check=False, capture_output=True
    )
    if probe.returncode == 0:
        return default
    digest = hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:12]
    # Predictable name, so _pg_owner_ok refuses it unless root or postgres owns it (no symlink).
    return Path("/var/tmp") / f"tranche-pg-{digest}"  # noqa: S108


def layout() -> Layout:
    state = Path(os.environ.get("TRANCHE_STATE_DIR", REPO / ".state"))
    return Layout(
        pg_root=_pg_root(state),
        state=state,
        pg_port=int(os.environ.get("TRANCHE_DB_PORT", "15432")),
        redis_port=int(os.environ.get("TRANCHE_REDIS_PORT", "16379")),
    )


class ServiceError(RuntimeError):
    """A service could not be started; the message says which and where its log is."""


def secret(lay: Layout, name: str) -> str:
    lay.secrets.mkdir(parents=True, exist_ok=True)
    os.chmod(lay.secrets, 0o700)
    path = lay.secrets / name
    if not path.exists():
        path.write_text(secrets.token_urlsafe(24))
        os.chmod(path, 0o600)
    return path.read_text().strip()


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


# --- PostgreSQL -----------------------------------------------------------------------------


def _pg_bin(tool: str) -> str:
    found = sorted(glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    if found:
        return found[-1]
    path = shutil.which(tool)
    if not path:
        raise ServiceError(f"PostgreSQL's {tool} is not installed; run `make setup`")
    return path


def _as_pg_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _pg_owner_ok(lay: Layout) -> None:
    """As root, hand the data folder to `postgres` and make sure that user can reach it."""
    if os.geteuid() != 0:
        return
    pg = pwd.getpwnam("postgres")
    lay.pg_data.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = lay.pg_root.lstat()
    if lay.pg_root.is_symlink() or info.st_uid not in (0, pg.pw_uid):
        raise ServiceError(
            f"{lay.pg_root} is a link or belongs to uid {info.st_uid}, not root or postgres; "
            "refusing to keep database files there. Remove it or set TRANCHE_STATE_DIR"
        )
    for path in (lay.pg_data.parent, lay.pg_data):
        if path.exists():
            os.chown(path, pg.pw_uid, pg.pw_gid)
    probe = subprocess.run(
        _as_pg_user(["test", "-w", str(lay.pg_data.parent)]), check=False, capture_output=True
    )
    if probe.returncode != 0:
        raise ServiceError(
            f"the postgres user cannot write {lay.pg_data.parent}: a parent folder is not "
            "traversable. Set TRANCHE_STATE_DIR to a folder under /var/tmp, or use an existing "
            "server with TRANCHE_DB_HOST"
        )


def _set_orphaned_data_aside(lay: Layout) -> Path | None:
    """Move aside a data folder that outlived its checkout's secrets; returns where it went.

    A data folder outside the state folder (a clone under /root keeps it under /var/tmp, named
    from the checkout's path) survives deleting the clone; a new clone at the same path then finds
    it while its passwords went with the old clone's secrets, and every connection is refused
    ("password authentication failed"). Without those secrets nothing of Tranche can use it, so it
    is kept under another name and a new cluster is made."""
    if lay.pg_root == lay.state / "pg" or (lay.secrets / "db-admin-password").exists():
        return None
    if not (lay.pg_data / "PG_VERSION").exists() or read_pid(lay.pg_data / "postmaster.pid"):
        return None
    aside = lay.pg_root.with_name(f"{lay.pg_root.name}.orphaned-{int(time.time())}")
    lay.pg_root.rename(aside)
    return aside


def start_postgres(lay: Layout) -> str:
    if os.environ.get("TRANCHE_DB_HOST"):
        return f"PostgreSQL: using existing server at {os.environ['TRANCHE_DB_HOST']}"
    aside = _set_orphaned_data_aside(lay)
    if aside:
        print(f"PostgreSQL: data whose passwords went with an earlier checkout moved to {aside}")
    password = secret(lay, "db-password")
    admin_password = secret(lay, "db-admin-password")
    _pg_owner_ok(lay)
    log = lay.pg_log
    log.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        log.touch()
        shutil.chown(log, "postgres")
    if not (lay.pg_data / "PG_VERSION").exists():
        pwfile = lay.pg_data.parent / "initdb.pw"
        pwfile.write_text(admin_password)
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres")
        init = subprocess.run(
            _as_pg_user(
                [
                    _pg_bin("initdb"),
                    "-D",
                    str(lay.pg_data),
                    "-U",
                    "postgres",
                    "--pwfile",
                    str(pwfile),
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            check=False,
            capture_output=True,
            text=True,
        )
        pwfile.unlink(missing_ok=True)
        if init.returncode != 0:
            raise ServiceError(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
    if not read_pid(lay.pg_data / "postmaster.pid") and not port_open(lay.pg_port):
        opts = f"-p {lay.pg_port} -k {lay.pg_data} -c listen_addresses=127.0.0.1"
        started = subprocess.run(
            _as_pg_user(
                [
                    _pg_bin("pg_ctl"),
                    "-D",
                    str(lay.pg_data),
                    "-l",
                    str(log),
                    "-o",
                    opts,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=False,
            capture_output=True,
            text=True,
        )
        if started.returncode != 0:
            raise ServiceError(f"PostgreSQL did not start on port {lay.pg_port}; see {log}")
    _ensure_role(lay, password, admin_password)
    return f"PostgreSQL: 127.0.0.1:{lay.pg_port} (data {lay.pg_data}, log {log})"


def _psql(lay: Layout, admin_password: str, sql: str, db: str = "postgres") -> str:
    env = {**os.environ, "PGPASSWORD": admin_password}
    out = subprocess.run(
        [
            "psql",
            "-h",
            "127.0.0.1",
            "-p",
            str(lay.pg_port),
            "-U",
            "postgres",
            "-d",
            db,
            "-tAc",
            sql,
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    if out.returncode != 0:
        raise ServiceError(f"psql failed: {out.stderr.strip()}")
    return out.stdout.strip()


def _ensure_role(lay: Layout, password: str, admin_password: str) -> None:
    quoted = password.replace("'", "''")
    if _psql(lay, admin_password, "SELECT 1 FROM pg_roles WHERE rolname='tranche'") != "1":
        _psql(lay, admin_password, f"CREATE ROLE tranche LOGIN CREATEDB PASSWORD '{quoted}'")
    else:
        _psql(lay, admin_password, f"ALTER ROLE tranche PASSWORD '{quoted}'")
    if _psql(lay, admin_password, "SELECT 1 FROM pg_database WHERE datname='tranche'") != "1":
        _psql(lay, admin_password, "CREATE DATABASE tranche OWNER tranche")


def stop_postgres(lay: Layout) -> bool:
    if not (lay.pg_data / "PG_VERSION").exists():
        return False
    res = subprocess.run(
        _as_pg_user([_pg_bin("pg_ctl"), "-D", str(lay.pg_data), "-m", "fast", "-w", "stop"]),
        check=False,
        capture_output=True,
        text=True,
    )
    return res.returncode == 0


# --- Redis ----------------------------------------------------------------------------------


def start_redis(lay: Layout) -> str:
    if os.environ.get("TRANCHE_REDIS_URL"):
        return "Redis: using existing server from TRANCHE_REDIS_URL"
    password = secret(lay, "redis-password")
    lay.redis_dir.mkdir(parents=True, exist_ok=True)
    pidfile = lay.redis_dir / "redis.pid"
    log = lay.state / "logs" / "redis.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    if not read_pid(pidfile):
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        # The config goes on stdin so the password never shows in `ps`.
        conf = "\n".join(
            [
                f"port {lay.redis_port}",
                "bind 127.0.0.1",
                "protected-mode yes",
                "daemonize yes",
                f"pidfile {pidfile}",
                f"logfile {log}",
                f"dir {lay.redis_dir}",
                # Append-only so queued Celery tasks survive a Redis restart.
                "appendonly yes",
                'save ""',
                f"requirepass {password}",
            ]
        )
        res = subprocess.run([binary, "-"], input=conf, check=False, capture_output=True, text=True)
        if res.returncode != 0 or not wait_until(lambda: port_open(lay.redis_port), 10):
            raise ServiceError(f"Redis did not start on port {lay.redis_port}; see {log}")
    return f"Redis: 127.0.0.1:{lay.redis_port} (data {lay.redis_dir}, log {log})"


def stop_redis(lay: Layout) -> bool:
    pid = read_pid(lay.redis_dir / "redis.pid")
    if pid:
        stop_pid(pid)
    return pid is not None


def up() -> list[str]:
    lay = layout()
    return [start_postgres(lay), start_redis(lay)]


def down() -> None:
    lay = layout()
    stop_redis(lay)
    stop_postgres(lay)
