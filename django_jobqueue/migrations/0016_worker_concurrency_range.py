"""Worker rows: the bounds of ``--concurrency MIN:MAX``, so the admin shows "4 (range 2–8)".

Two nullable columns, written when a worker registers. Workers of the release
before leave them NULL, which reads as a fixed number of slots: their rows
show their slot count alone, as before.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0015_schedule_due"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="min_concurrency",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="worker",
            name="max_concurrency",
            field=models.IntegerField(blank=True, null=True),
        ),
    ]
