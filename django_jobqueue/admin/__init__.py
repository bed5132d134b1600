"""The operator's admin: jobs, dead letters, batches, schedules, workers and the queue overview.

Every change an operator makes goes through ``QueueClient``; nothing here
writes a job or dead-letter row itself. Who may do what follows Django's model
permissions: *view* to look, *change* to retry or cancel, *delete* to delete
dead letters; *change* on a schedule to pause, resume or run it now.
"""

from django.contrib import admin

from ..models import Batch, DeadLetter, Job, QueueOverview, Schedule, Worker
from .batches import BatchAdmin
from .dead_letters import DeadLetterAdmin
from .jobs import JobAdmin
from .overview import QueueOverviewAdmin, WorkerAdmin
from .schedules import ScheduleAdmin

admin.site.register(Job, JobAdmin)
admin.site.register(DeadLetter, DeadLetterAdmin)
admin.site.register(Batch, BatchAdmin)
admin.site.register(Schedule, ScheduleAdmin)
admin.site.register(QueueOverview, QueueOverviewAdmin)
admin.site.register(Worker, WorkerAdmin)
