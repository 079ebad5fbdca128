"""A real BuildGrid (REAPI server) with its private PostgreSQL, for the tests (tools/buildgrid.sh).

    grid = BuildGrid.start(directory)   PostgreSQL, then BuildGrid, on free loopback ports
    grid.address                        grpc://127.0.0.1:PORT (--remote_cache, --remote_executor)
    grid.restart()                      BuildGrid stopped and started again on the same port
    grid.stop()                         both stopped by the PIDs they were started with

Each server is the child the test started (the script execs it), so stop()
ends exactly it: SIGTERM, then SIGKILL after a few seconds. PostgreSQL's own
children exit with their postmaster. `unavailable_reason()` says why this
platform cannot have them (no Python 3.13, no postgresql and no root to
install it), for a skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.loopback_ports import free_port, owns_port

SCRIPT = Path(__file__).resolve().parent.parent / "tools" / "buildgrid.sh"
# The venv is cached under the real home, whatever HOME a test sets.
TOOLS_CACHE = Path(os.environ.get("KILN_TOOLS_CACHE", Path.home() / ".cache" / "kiln-tools"))


def _env() -> dict[str, str]:
    return {**os.environ, "KILN_TOOLS_CACHE": str(TOOLS_CACHE)}


def _script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
        timeout=timeout,
    )


def unavailable_reason() -> str | None:
    """Why BuildGrid and PostgreSQL cannot run here; None if they can (made if missing)."""
    if not shutil.which("bash") or os.name != "posix":
        return "BuildGrid's scripts need a POSIX shell"
    for step in ("venv", "postgres-install"):
        run = _script(step)
        if run.returncode != 0:
            return f"tools/buildgrid.sh {step} failed: {run.stderr.strip()[-400:]}"
    return None


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@dataclass
class BuildGrid:
    directory: Path
    port: int = 0
    pg_port: int = 0
    keepalive: int = 20  # bot-session-keepalive-timeout: a dead bot's leases come back after it
    postgres: subprocess.Popen[bytes] | None = None
    server: subprocess.Popen[bytes] | None = None
    _logs: list[Path] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    @property
    def cas_dir(self) -> Path:
        """BuildGrid's disk storage: a blob per file, named by its hash."""
        return self.directory / "server" / "cas"

    @staticmethod
    def start(directory: Path, keepalive: int = 20) -> BuildGrid:
        directory.mkdir(parents=True, exist_ok=True)
        grid = BuildGrid(directory, keepalive=keepalive)
        try:
            grid._start_postgres()
            for _ in range(5):  # another process may take the free port first
                grid.port = free_port()
                with contextlib.suppress(RuntimeError):
                    grid._start_server()
                    break
                grid.stop_server()
            else:
                raise RuntimeError("BuildGrid did not start (see buildgrid.log)")
        except BaseException:
            grid.stop()
            raise
        return grid

    def _popen(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = self.directory / f"{name}.log"
        self._logs.append(log)
        with log.open("ab") as out:
            return subprocess.Popen(
                ["bash", str(SCRIPT), *args], stdout=out, stderr=subprocess.STDOUT, env=_env()
            )

    def _wait(self, process: subprocess.Popen[bytes], port: int, what: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if owns_port(process.pid, port):  # not another suite's server on the port
                return
            time.sleep(0.1)
        log = self.directory / f"{what}.log"
        raise RuntimeError(f"{what} did not start: {log.read_text(errors='replace')[-2000:]}")

    def _start_postgres(self) -> None:
        pg_dir = self.directory / "pg"
        for _ in range(5):  # another process may take the free port first
            self.pg_port = free_port()
            self.postgres = self._popen("postgres", "postgres", str(pg_dir), str(self.pg_port))
            with contextlib.suppress(RuntimeError):
                self._wait(self.postgres, self.pg_port, "postgres", 30)
                break
            _stop(self.postgres)
        else:
            raise RuntimeError("PostgreSQL did not start")
        time.sleep(0.3)  # listening before it accepts logins: migrate retries below
        for attempt in range(20):
            run = _script("migrate", str(pg_dir), str(self.pg_port), timeout=120)
            if run.returncode == 0:
                return
            if "already exists" in run.stderr or attempt == 19:
                raise RuntimeError(f"cannot set up BuildGrid's database: {run.stderr}")
            time.sleep(0.3)

    def _start_server(self) -> None:
        self.server = self._popen(
            "buildgrid",
            "serve",
            str(self.directory / "server"),
            str(self.port),
            str(self.pg_port),
            str(self.keepalive),
        )
        self._wait(self.server, self.port, "buildgrid", 60)

    def stop_server(self) -> None:
        """BuildGrid alone stopped (the server down, or going down mid-build)."""
        _stop(self.server)
        self.server = None

    def restart(self) -> None:
        self.stop_server()
        self._start_server()

    def stop(self) -> None:
        _stop(self.server)
        self.server = None
        _stop(self.postgres)
        self.postgres = None
        link = self.directory / "pg" / "pgdata"
        if link.is_symlink():  # as root the cluster lives under /tmp (tools/buildgrid.sh)
            shutil.rmtree(link.resolve(), ignore_errors=True)
            link.unlink()
