"""The bench's databases: PostgreSQL's made through the ``postgres`` database of their server,
MySQL's by its root."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def create_database(url: str, fresh: bool = False) -> None:
    """Create the PostgreSQL database of ``url`` if it does not exist; ``fresh``: drop it first if it does."""
    import psycopg

    parts = urlsplit(url.replace("postgres://", "postgresql://", 1))
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        if fresh:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    """Drop the PostgreSQL database of ``url`` if it exists, ending its sessions first."""
    import psycopg

    parts = urlsplit(url.replace("postgres://", "postgresql://", 1))
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def create_mysql_database(url: str) -> None:
    """Create the MySQL or MariaDB database of ``url`` if it does not exist."""
    import MySQLdb

    parts = urlsplit(url)
    conn = MySQLdb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
    )
    name = parts.path.lstrip("/")
    conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
    conn.close()
