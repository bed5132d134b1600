"""Schedules: an index of their next fire times, by which a worker reads only the due ones.

``next_fire_at`` was written for pages alone; the workers now keep it at or
before each schedule's first fire time not yet handled, and each wake reads
the rows whose time came through this index instead of every row. The values
older code wrote are all such (the next fire time after a fire, or None,
which is read as due), so no row is rewritten.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0014_batch_counts_of_operators"),
    ]

    operations = [
        migrations.AlterField(
            model_name="schedule",
            name="next_fire_at",
            field=models.DateTimeField(
                blank=True, help_text="no fire time after handled_through comes before this", null=True
            ),
        ),
        migrations.AddIndex(
            model_name="schedule",
            index=models.Index(fields=["next_fire_at"], name="jobqueue_schedule_due_idx"),
        ),
    ]
