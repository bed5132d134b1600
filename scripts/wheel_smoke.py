"""Install the built wheel as a user would, and run a job through it.

    python scripts/wheel_smoke.py dist/django_jobqueue-X-py3-none-any.whl \\
        [--python python3.13] [--django 'Django>=6.0,<6.2'] [--database-url postgres://...]

In a temporary directory, with none of the repository on the path: a fresh
virtualenv gets the wheel (with its ``postgres`` extra), ``django-admin
startproject`` makes a site, ``startapp`` an app with one ``@job``, and the
settings gain ``django_jobqueue`` and nothing else of ours. Then, on SQLite and
on the PostgreSQL of ``--database-url`` when given: ``migrate``, enqueue a job,
``runworker --burst``, check that it ran, ``collectstatic``, and fetch the
admin's job list and the job's page from a real server, with every stylesheet
and script they name fetched from the collected static files.

Any step that fails stops the run with its output and a non-zero exit.
"""

from __future__ import annotations

import argparse
import http.cookiejar
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PASSWORD = "smoke-test-password"  # noqa: S105 - a throwaway superuser of a throwaway site

JOBS_MODULE = """\
from django_jobqueue import job


@job(queue="smoke")
def greet(name):
    return f"hello, {name}"
"""

SETTINGS_TAIL = """

# django-jobqueue's wheel smoke test: what a user adds, and where the site lives.
import os  # noqa: E402

INSTALLED_APPS += ["django_jobqueue", "shop"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
STATIC_URL = os.environ["SMOKE_STATIC_URL"]
STATIC_ROOT = BASE_DIR / "collected"
if os.environ.get("SMOKE_PG_NAME"):
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ["SMOKE_PG_NAME"],
            "USER": os.environ["SMOKE_PG_USER"],
            "PASSWORD": os.environ.get("SMOKE_PG_PASSWORD", ""),
            "HOST": os.environ["SMOKE_PG_HOST"],
            "PORT": os.environ["SMOKE_PG_PORT"],
        }
    }
"""


class SmokeFailure(Exception):
    pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--python", default=sys.executable, help="the Python of the new virtualenv")
    parser.add_argument("--django", default="", help="a requirement for Django, e.g. 'Django>=6.0,<6.2'")
    parser.add_argument(
        "--database-url", default="", help="postgres://user@host:port/name: a database to create"
    )
    args = parser.parse_args()
    try:
        with tempfile.TemporaryDirectory(prefix="jobqueue-wheel-") as directory:
            smoke(args.wheel.resolve(), args.python, args.django, args.database_url, Path(directory))
    except SmokeFailure as failure:
        print(f"wheel smoke test FAILED: {failure}", file=sys.stderr)
        return 1
    return 0


def smoke(wheel: Path, python: str, django: str, database_url: str, home: Path) -> None:
    venv = home / "venv"
    run([python, "-m", "venv", str(venv)], cwd=home)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    # The user's pip cache: the same downloads as any install, without fetching them twice.
    pip_cache = {"PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip"))}
    run(
        [*pip, f"{wheel}[postgres]", *([django] if django else [])],
        cwd=home,
        env=clean_environment(home) | pip_cache,
    )
    interpreter = str(venv / "bin" / "python")
    installed = run(
        [
            interpreter,
            "-c",
            "import django, django_jobqueue as q; print(q.__file__, q.__version__, django.get_version())",
        ],
        cwd=home,
    )
    location, version, django_version = installed.split()
    if not location.startswith(str(venv)):
        raise SmokeFailure(f"django_jobqueue was imported from {location}, not from the new virtualenv")
    print(f"installed django-jobqueue {version} on Django {django_version}, {python_version(interpreter)}")

    site = home / "site"
    site.mkdir()
    run([str(venv / "bin" / "django-admin"), "startproject", "mysite", "."], cwd=site)
    run([interpreter, "manage.py", "startapp", "shop"], cwd=site)
    (site / "shop" / "jobs.py").write_text(JOBS_MODULE)
    with open(site / "mysite" / "settings.py", "a") as settings:
        settings.write(SETTINGS_TAIL)

    with static_server(site / "collected") as static_url:
        environment = clean_environment(home) | {"SMOKE_STATIC_URL": static_url}
        run_on(site, interpreter, environment, "SQLite")
        if database_url:
            with postgres_database(interpreter, database_url, environment) as pg_environment:
                run_on(site, interpreter, pg_environment, "PostgreSQL")


def run_on(site: Path, python: str, environment: dict[str, str], database: str) -> None:
    """Migrate, run a job, serve the admin: the whole path on one database."""

    def manage(*arguments: str, extra: dict[str, str] | None = None) -> str:
        return run([python, "manage.py", *arguments], cwd=site, env=environment | (extra or {}))

    def shell(code: str) -> str:
        return manage("shell", "--verbosity=0", "-c", code).splitlines()[-1]

    manage("migrate", "--noinput")
    job_id = shell("from shop.jobs import greet; print(greet.enqueue(name='world').pk)")
    manage("runworker", "--queue", "smoke", "--burst")
    read_back = f"from django_jobqueue.models import Job; job = Job.objects.get(pk={job_id})"
    status = shell(f"{read_back}; print(job.status, job.result)")
    if status != "done hello, world":
        raise SmokeFailure(f"on {database}, job {job_id} after runworker --burst: {status!r}")
    manage("collectstatic", "--noinput")
    manage(
        "createsuperuser",
        "--noinput",
        "--username=admin",
        "--email=admin@example.com",
        extra={"DJANGO_SUPERUSER_PASSWORD": PASSWORD},
    )
    with web_server(python, site, environment) as site_url:
        pages = admin_pages(site_url, environment["SMOKE_STATIC_URL"], job_id)
    print(f"{database}: migrate, enqueue, runworker --burst, collectstatic, {pages}: ok")


def admin_pages(site_url: str, static_url: str, job_id: str) -> str:
    """Log in, fetch the job list and the job's page; fetch every asset they name."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    login_url = f"{site_url}/admin/login/?next=/admin/"
    form = fetch(opener, login_url)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
    if token is None:
        raise SmokeFailure("the admin's login page has no CSRF token")
    fields = {
        "csrfmiddlewaretoken": token.group(1),
        "username": "admin",
        "password": PASSWORD,
        "next": "/admin/",
    }
    request = urllib.request.Request(
        login_url, data=urllib.parse.urlencode(fields).encode(), headers={"Referer": login_url}
    )
    if "log out" not in fetch(opener, request).lower():
        raise SmokeFailure("logging in to the admin failed")
    assets: set[str] = set()
    for path, expected in (
        ("/admin/django_jobqueue/job/", "shop.jobs.greet"),
        (f"/admin/django_jobqueue/job/{job_id}/change/", "hello, world"),
    ):
        page = fetch(opener, site_url + path)
        if expected not in page:
            raise SmokeFailure(f"{path} does not show {expected!r}")
        assets |= {
            url
            for url in re.findall(r'(?:href|src)="([^"]+\.(?:css|js))"', page)
            if url.startswith(static_url)
        }
    ours = [url for url in assets if "/django_jobqueue/" in url]
    if not ours:
        raise SmokeFailure(f"the admin pages name none of django_jobqueue's static files: {sorted(assets)}")
    for url in sorted(assets):
        fetch(opener, url)
    return f"the admin's job list and job page, {len(assets)} stylesheets and scripts ({len(ours)} of ours)"


def fetch(opener: urllib.request.OpenerDirector, request: str | urllib.request.Request) -> str:
    url = request if isinstance(request, str) else request.full_url
    try:
        with opener.open(request, timeout=30) as response:
            if response.status != 200:
                raise SmokeFailure(f"{url}: HTTP {response.status}")
            return response.read().decode()
    except OSError as error:
        raise SmokeFailure(f"{url}: {error}") from error


@contextmanager
def web_server(python: str, site: Path, environment: dict[str, str]) -> Iterator[str]:
    port = free_port()
    with serving(
        [python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], site, environment, port
    ):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def static_server(root: Path) -> Iterator[str]:
    """The collected files, served as a web server in front of Django would."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "http.server",
        str(port),
        "--bind",
        "127.0.0.1",
        "--directory",
        str(root),
    ]
    with serving(command, root, clean_environment(root), port):
        yield f"http://127.0.0.1:{port}/"


@contextmanager
def serving(command: list[str], cwd: Path, environment: dict[str, str], port: int) -> Iterator[None]:
    log = tempfile.TemporaryFile()
    server = subprocess.Popen(command, cwd=cwd, env=environment, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise SmokeFailure(f"{' '.join(command)} did not serve:\n{log.read().decode()}")
            time.sleep(0.1)
        yield
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@contextmanager
def postgres_database(python: str, url: str, environment: dict[str, str]) -> Iterator[dict[str, str]]:
    """A new database beside the one of ``url``, dropped afterwards."""
    parts = urllib.parse.urlsplit(url)
    name = "jobqueue_wheel_smoke"
    server = {
        "SMOKE_PG_HOST": parts.hostname or "127.0.0.1",
        "SMOKE_PG_PORT": str(parts.port or 5432),
        "SMOKE_PG_USER": urllib.parse.unquote(parts.username or "postgres"),
        "SMOKE_PG_PASSWORD": urllib.parse.unquote(parts.password or ""),
    }
    maintenance = (
        "import os, psycopg, sys\n"
        "with psycopg.connect(host=os.environ['SMOKE_PG_HOST'], port=os.environ['SMOKE_PG_PORT'],"
        " user=os.environ['SMOKE_PG_USER'], password=os.environ['SMOKE_PG_PASSWORD'],"
        " dbname='postgres', autocommit=True) as connection:\n"
        "    for statement in sys.argv[1:]:\n"
        "        connection.execute(statement)\n"
    )
    drop = f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    run(
        [python, "-c", maintenance, drop, f"CREATE DATABASE {name}"], cwd=Path.cwd(), env=environment | server
    )
    try:
        yield environment | server | {"SMOKE_PG_NAME": name}
    finally:
        run([python, "-c", maintenance, drop], cwd=Path.cwd(), env=environment | server)


def clean_environment(home: Path) -> dict[str, str]:
    """This process's environment with nothing that would find the repository."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "TZ")
    return {name: os.environ[name] for name in keep if name in os.environ} | {"HOME": str(home)}


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    environment = env if env is not None else clean_environment(cwd)
    done = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SmokeFailure(
            f"{' '.join(command)} exited with {done.returncode}:\n"
            + textwrap.indent(done.stdout + done.stderr, "    ")
        )
    return done.stdout.strip()


def python_version(python: str) -> str:
    return run([python, "-c", "import platform; print('Python', platform.python_version())"], cwd=Path("/"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
    except OSError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
