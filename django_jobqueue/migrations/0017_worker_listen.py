"""Worker rows: the state of a worker's LISTEN, so that ``jobqueue status`` shows who polls.

One nullable column, written when a worker registers and when its LISTEN is
found live or deaf. Workers of the release before leave it NULL, which the
status shows as unknown.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0016_worker_concurrency_range"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="listen",
            field=models.CharField(blank=True, max_length=16, null=True),
        ),
    ]
