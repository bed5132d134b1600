from django.apps import AppConfig


class JobQueueConfig(AppConfig):
    name = "django_jobqueue"
    label = "django_jobqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
        from .loader import load_job_modules

        # Every process, not only workers, registers the @job functions, so that
        # enqueue("name", ...) in a web process gets that job's @job defaults
        # (queue, priority, max_attempts, visibility_timeout, timeout, concurrency_limit) too.
        load_job_modules()
