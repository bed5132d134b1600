"""On PostgreSQL, a job named in ``depends_on`` is marked ``has_dependents`` when the enqueue commits.

Until now the enqueue marked it at once, an ``UPDATE`` of the dependency's row
that held the row's lock until the enqueue's transaction committed: a worker's
heartbeat, its ack and its claim round waited on it for as long as the
producer's transaction stayed open, and a claim whose heartbeat could not
renew it expired and was run again elsewhere. The enqueue now reads the
dependency ``FOR KEY SHARE`` (it keeps the job from finishing until the
enqueue commits, and holds up nothing else of it: claims, heartbeats and
retries change a job in place), and this deferred trigger marks it in the
commit itself, holding the row's lock for the commit alone
(``queue/ops/dependencies.py``).

The mark is written where it is still missing, so a producer of the release
before, which marks the job itself, meets a row already marked. A deadlock or
a serialization failure meeting another transaction is tried again, as the
queue's own statements are (``queue/conflicts.py``). Other databases keep the
mark written at enqueue: SQLite has one writer at a time, whose lock the
producer holds anyway.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

FUNCTION = "django_jobqueue_flag_dependency"
TRIGGER = "django_jobqueue_flag_dependency"
# Tries before the commit gives up with the error; each pause is 10 ms.
ATTEMPTS = 20

CREATE_FUNCTION = f"""
CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    attempt integer := 1;
BEGIN
    LOOP
        BEGIN
            UPDATE django_jobqueue_job SET has_dependents = TRUE
            WHERE id = NEW.dependency_id AND status IN ('ready', 'running', 'waiting')
            AND NOT has_dependents;
            RETURN NULL;
        EXCEPTION WHEN deadlock_detected OR serialization_failure THEN
            IF attempt >= {ATTEMPTS} THEN
                RAISE;
            END IF;
            attempt := attempt + 1;
            PERFORM pg_sleep(0.01);
        END;
    END LOOP;
END
$$
"""
CREATE_TRIGGER = (
    f"CREATE CONSTRAINT TRIGGER {TRIGGER} AFTER INSERT ON django_jobqueue_dependency "
    f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
)


def create(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(CREATE_FUNCTION)
    schema_editor.execute(CREATE_TRIGGER)


def drop(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON django_jobqueue_dependency")
    schema_editor.execute(f"DROP FUNCTION IF EXISTS {FUNCTION}()")


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0011_job_partitions"),
    ]

    operations = [
        migrations.RunPython(create, drop, elidable=False),
    ]
