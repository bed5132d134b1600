"""A real PgBouncer in transaction mode in front of the test database, for the tests that need one.

``pgbouncer(host, port)`` starts one on a free local port and yields that
port; it is stopped on leaving. Tests that need it skip where no
``pgbouncer`` is installed.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
ignore_startup_parameters = extra_float_digits,options
logfile = {dir}/pgbouncer.log
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def pgbouncer(host: str, port: int) -> Iterator[int]:
    """Run PgBouncer in transaction mode in front of ``host:port``; yield the port it listens on."""
    if not os.path.exists(PGBOUNCER):
        pytest.skip("pgbouncer is not installed")
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    listen = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(CONFIG.format(host=host, port=port, listen=listen, dir=folder))
    command = [PGBOUNCER, "-q", str(ini)]
    if os.geteuid() == 0:  # PgBouncer will not run as root
        shutil.chown(folder, "postgres")
        for path in folder.iterdir():
            shutil.chown(path, "postgres")
        command = ["runuser", "-u", "postgres", "--", *command]
    # In the foreground, in a process group of its own: stopped and reaped here.
    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_listening(listen, folder)
        yield listen
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(port: int, folder: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                log = (folder / "pgbouncer.log").read_text() if (folder / "pgbouncer.log").exists() else ""
                pytest.fail(f"pgbouncer did not listen on {port}:\n{log}")
            time.sleep(0.05)
