from django.apps import AppConfig


class JobQueueConfig(AppConfig):
    name = "django_jobqueue"
    label = "django_jobqueue"
    verbose_name = "Job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks
