"""A throwaway PostgreSQL cluster or MariaDB server, and a network namespace, for the faults that
need their own.

The machine's main cluster is shared, so a test never restarts it: it starts
its own cluster (``initdb`` into a temporary directory, ``pg_ctl`` on a free
port, run as the ``postgres`` OS user), migrates a database in it, and
removes it all afterwards.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import environ
import pytest
from django.db import connections
from django.db.utils import load_backend

from tests.worker_support import ROOT

DATABASE = "jq_faults"


def binaries() -> Path | None:
    """The directory of initdb, pg_ctl and psql, as ``scripts/pg bindir`` finds it; None without one."""
    script = str(ROOT / "scripts" / "pg")
    found = subprocess.run([script, "bindir"], capture_output=True, text=True, timeout=30)
    return Path(found.stdout.strip()) if found.returncode == 0 else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def as_postgres(*command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as the ``postgres`` OS user (initdb refuses to run as root)."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run([*prefix, *command], capture_output=True, text=True, timeout=timeout, check=True)


def migrate(url: str) -> None:
    """``manage.py migrate`` of this tree on the database at ``url``, in a process of its own."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        check=True,
        timeout=120,
    )


class Cluster:
    """A PostgreSQL cluster of its own, listening on ``127.0.0.1`` and ``extra_addresses``."""

    def __init__(
        self, bin_dir: Path, extra_addresses: tuple[str, ...] = (), trusted_network: str | None = None
    ) -> None:
        self.bin_dir = bin_dir
        self.port = free_port()
        self.addresses = ("127.0.0.1", *extra_addresses)
        self.trusted_network = trusted_network
        self.home = Path(tempfile.mkdtemp(prefix="jq-faults-pg-"))
        self.data = self.home / "data"
        self.log_file = self.home / "server.log"

    def url(self, host: str = "127.0.0.1") -> str:
        return f"postgres://postgres@{host}:{self.port}/{DATABASE}"

    def create(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.home, "postgres", "postgres")
        initdb = str(self.bin_dir / "initdb")
        as_postgres(initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '{','.join(self.addresses)}'\n"
                f"unix_socket_directories = '{self.home}'\nmax_connections = 200\n"
            )
        if self.trusted_network:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.trusted_network} trust\n")
        self.start()
        as_postgres(
            str(self.bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
            "-c", f"CREATE DATABASE {DATABASE}",
        )  # fmt: skip
        migrate(self.url())

    def pg_ctl(self, *args: str) -> None:
        as_postgres(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log_file), "-w", *args)

    def start(self) -> None:
        self.pg_ctl("start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("stop", "-m", mode)

    def crash(self) -> None:
        """Stop as a crash does: no checkpoint, recovery from the WAL at the next start."""
        self.stop("immediate")

    def remove(self) -> None:
        try:
            self.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # not running
        shutil.rmtree(self.home, ignore_errors=True)


@contextmanager
def throwaway_cluster(
    extra_addresses: tuple[str, ...] = (), trusted_network: str | None = None
) -> Iterator[Cluster]:
    """A new cluster, migrated, listening on 127.0.0.1 and ``extra_addresses``; removed afterwards."""
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip("scripts/pg bindir finds no PostgreSQL binaries to start a throwaway cluster with")
    cluster = Cluster(bin_dir, extra_addresses, trusted_network)
    try:
        cluster.create()
        yield cluster
    finally:
        cluster.remove()


class MariaDBServer:
    """A MariaDB server of its own: ``mariadb-install-db`` into a temporary directory, ``mariadbd``
    on a free port as the ``mysql`` OS user, root without a password; a database migrated in it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="jq-faults-mariadb-"))
        self.data = self.home / "data"
        self.process: subprocess.Popen[bytes] | None = None

    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{DATABASE}"

    def create(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.home, "mysql", "mysql")
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", f"--datadir={self.data}", "--user=mysql",
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            capture_output=True, check=True, timeout=120,
        )  # fmt: skip
        self.start()
        self.client(f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4")
        migrate(self.url())

    def client(self, sql: str) -> None:
        subprocess.run(
            ["mariadb", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "-e", sql],
            capture_output=True, check=True, timeout=30,
        )  # fmt: skip

    def start(self) -> None:
        prefix = ["runuser", "-u", "mysql", "--"] if os.geteuid() == 0 else []
        self.process = subprocess.Popen(
            [*prefix, "/usr/sbin/mariadbd", "--no-defaults", f"--datadir={self.data}",
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.home / 'socket'}",
             f"--pid-file={self.home / 'pid'}", f"--log-error={self.home / 'server.log'}",
             "--innodb-buffer-pool-size=64M", "--max-connections=300"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        for _ in range(120):
            ping = subprocess.run(
                ["mariadb-admin", "-h", "127.0.0.1", "-P", str(self.port), "-u", "root", "ping"],
                capture_output=True,
            )
            if ping.returncode == 0:
                return
            time.sleep(0.25)
        raise RuntimeError(f"mariadbd did not answer on port {self.port}: {self.home / 'server.log'}")

    def crash(self) -> None:
        """SIGKILL the server, as a crash: InnoDB recovers from its redo log at the next start."""
        if self.process is not None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
            self.process = None

    def remove(self) -> None:
        self.crash()
        shutil.rmtree(self.home, ignore_errors=True)


@contextmanager
def throwaway_mariadb() -> Iterator[MariaDBServer]:
    """A new MariaDB server, migrated, on 127.0.0.1; removed afterwards."""
    if shutil.which("mariadb-install-db") is None or not Path("/usr/sbin/mariadbd").exists():
        pytest.skip("no mariadb-install-db and mariadbd to start a throwaway MariaDB server with")
    server = MariaDBServer()
    try:
        server.create()
        yield server
    finally:
        server.remove()


class DatabaseAlias:
    """``url`` as ``connections[alias]``, in each thread that calls ``attach()``.

    The alias stays out of ``DATABASES``: Django's test case allows connections
    it did not set up only if they are not named there.
    """

    def __init__(self, alias: str, url: str) -> None:
        self.alias = alias
        config = environ.Env.db_url_config(url)
        self.settings = connections.configure_settings({"default": config})["default"]

    def attach(self) -> str:
        """Give this thread its own connection under the alias; return the alias."""
        wrapper = load_backend(self.settings["ENGINE"]).DatabaseWrapper(self.settings, self.alias)
        connections[self.alias] = wrapper
        return self.alias

    def close(self) -> None:
        """Close this thread's connection under the alias."""
        connections[self.alias].close()


@contextmanager
def database_alias(alias: str, url: str) -> Iterator[DatabaseAlias]:
    """Make ``url`` reachable as ``connections[alias]`` in this thread, for the test's duration."""
    database = DatabaseAlias(alias, url)
    database.attach()
    try:
        yield database
    finally:
        database.close()
        del connections[alias]


class Namespace:
    """A network namespace joined to this one by a veth pair on a private /30.

    The /30 is the ``index``-th of 10.231.0.0/16, so that test runs side by
    side each get their own. The host end gets its first address, the
    namespace end its second; no other route, address or firewall rule of the
    machine changes.
    """

    def __init__(self, name: str, index: int) -> None:
        self.name = name
        self.host_link = f"{name[:12]}-h"
        self.inner_link = f"{name[:12]}-n"
        network = ipaddress.IPv4Network("10.231.0.0/16").network_address + 4 * (index % 16384)
        self.host_address = str(network + 1)
        self.inner_address = str(network + 2)
        self.network = f"{network}/30"

    def ip(self, *args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)

    def create(self) -> None:
        self.ip("netns", "add", self.name)
        self.ip("link", "add", self.host_link, "type", "veth", "peer", "name", self.inner_link)
        self.ip("link", "set", self.inner_link, "netns", self.name)
        self.ip("addr", "add", f"{self.host_address}/30", "dev", self.host_link)
        self.ip("link", "set", self.host_link, "up")
        inside = ("netns", "exec", self.name, "ip")
        self.ip(*inside, "addr", "add", f"{self.inner_address}/30", "dev", self.inner_link)
        self.ip(*inside, "link", "set", self.inner_link, "up")
        self.ip(*inside, "link", "set", "lo", "up")

    def cut(self) -> None:
        """Drop every packet between the namespace and the host, silently, as a partition does."""
        self.ip("link", "set", self.host_link, "down")

    def heal(self) -> None:
        self.ip("link", "set", self.host_link, "up")

    def command(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *command]

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_link], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=10)


@contextmanager
def network_namespace(name: str) -> Iterator[Namespace]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    namespace = Namespace(name, os.getpid())
    namespace.remove()  # what a killed earlier run may have left
    try:
        try:
            namespace.create()
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot set up a network namespace here: {exc.stderr.strip()}")
        yield namespace
    finally:
        namespace.remove()
