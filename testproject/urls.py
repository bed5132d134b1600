from django.contrib import admin
from django.urls import path

from django_jobqueue.views import metrics

urlpatterns = [
    path("admin/", admin.site.urls),
    # The queue's figures for Prometheus (docs/observability.md): staff or JOBQUEUE["METRICS_TOKEN"].
    path("jobqueue/metrics", metrics),
]
