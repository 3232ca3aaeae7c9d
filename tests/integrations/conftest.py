"""A real PostgreSQL server for the LangGraph tests: started once per session in a temporary
directory from the binaries on this machine (Debian's /usr/lib/postgresql/<v>/bin, or initdb on
PATH), on a unix socket, and stopped at teardown. initdb refuses to run as root, so as root the
server runs as the `postgres` user (runuser). Where no PostgreSQL binary exists the tests that
need it skip and say so; where UNSEE_REQUIRE_EXTRAS is set (.ci/run) they fail instead."""

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest


def postgres_bin() -> Path | None:
    """The folder of initdb, pg_ctl and pg_dump, newest version first; None where there is none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]), reverse=True)
    found += [p for p in [shutil.which("initdb")] if p]
    for p in found:
        d = Path(p).parent
        if (d / "pg_ctl").exists() and (d / "pg_dump").exists():
            return d
    return None


@dataclass
class Postgres:
    bin: Path
    data: Path  # the cluster's data directory
    socket: str  # the directory of its unix socket
    as_postgres: list  # the command prefix that runs a binary as the server's owner

    def url(self, db: str) -> str:
        return f"host={self.socket} user=postgres dbname={db}"

    def createdb(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url("postgres"), autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return name

    def dump(self, db: str) -> bytes:
        """pg_dump of the database, as SQL, followed by every bytea value in it decoded: pg_dump
        writes bytea as hex (\\x4d79...), where a byte search would never find a secret."""
        import re

        sql = subprocess.run([str(self.bin / "pg_dump"), "-h", self.socket, "-U", "postgres", db],
                             check=True, capture_output=True, timeout=120).stdout
        return sql + b"".join(bytes.fromhex(h.decode()) for h in re.findall(rb"\\\\?x((?:[0-9a-f]{2})+)", sql))

    def table_files(self, db: str, tables) -> dict[str, bytes]:
        """The bytes of each table's files on disk (its heap, its TOAST table and their indexes),
        after a CHECKPOINT has written every dirty page out."""
        import psycopg

        out = {}
        with psycopg.connect(self.url(db), autocommit=True) as c:
            c.execute("CHECKPOINT")
            for t in tables:
                rels = c.execute(
                    "SELECT pg_relation_filepath(r.oid) FROM pg_class r WHERE r.oid = %s::regclass "
                    "OR r.oid = (SELECT reltoastrelid FROM pg_class WHERE oid = %s::regclass) "
                    "OR r.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %s::regclass "
                    "OR indrelid = (SELECT reltoastrelid FROM pg_class WHERE oid = %s::regclass))",
                    (t, t, t, t)).fetchall()
                blob = b""
                for (rel,) in rels:
                    for p in sorted(glob.glob(str(self.data / rel) + "*")):  # segments .1 .2 and forks _fsm _vm
                        blob += Path(p).read_bytes()
                out[t] = blob
        return out


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for this session (see the module)."""
    bindir = postgres_bin()
    if bindir is None:
        why = "no PostgreSQL server binaries (initdb, pg_ctl, pg_dump) on this machine: install PostgreSQL 15"
        if os.environ.get("UNSEE_REQUIRE_EXTRAS"):
            pytest.fail(why + " (UNSEE_REQUIRE_EXTRAS is set: CI must run the Postgres tests)")
        pytest.skip(why)
    if os.environ.get("UNSEE_REQUIRE_EXTRAS"):
        import langgraph.checkpoint.postgres  # noqa: F401  (CI has the extra: a missing one fails here)
    pytest.importorskip("langgraph.checkpoint.postgres", reason="install the test extras: bash scripts/setup.sh --tests")
    # in memory where the machine has a tmpfs: each test's database is a copy of template1 (7 MB),
    # and deleting a few hundred MB of them from a busy disk took 15 s
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    root = Path(tempfile.mkdtemp(prefix="unsee-pg-", dir=shm))
    prefix = []
    if os.geteuid() == 0:  # initdb refuses root: the server belongs to the postgres user
        prefix = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data = root / "data"

    def run(*cmd):
        p = subprocess.run(prefix + [str(bindir / cmd[0]), *cmd[1:]], capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed ({p.returncode}): {p.stdout}\n{p.stderr}")

    run("initdb", "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
    opts = f"-k {root} -c listen_addresses='' -c fsync=off -c full_page_writes=off"
    run("pg_ctl", "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "-t", "60", "start")
    try:
        yield Postgres(bindir, data, str(root), prefix)
    finally:
        subprocess.run(prefix + [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(root, ignore_errors=True)
