"""A job page's dependencies (``depends_on``): what the job waits on, and what waits on it.

Only outstanding dependencies are rows (``Dependency``): once a dependency is
done its edge is gone, so a released or finished job waits on nothing.
"""

from __future__ import annotations

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import DeadLetter, Dependency, Job

# Links listed per side; a fan-out of 10,000 dependents says how many more there are.
SHOWN = 50
EMPTY = "—"


def waits_on(job: Job, site_name: str) -> SafeString | str:
    """Links to the jobs (or dead letters) ``job`` waits for."""
    edges = Dependency.objects.using(job._state.db).filter(dependent_id=job.pk)
    ids = list(edges.order_by("dependency_id").values_list("dependency_id", flat=True)[: SHOWN + 1])
    if not ids:
        return EMPTY
    using = job._state.db
    jobs = {row.pk: row for row in Job.objects.using(using).filter(pk__in=ids).only("id", "name", "status")}
    dead = {
        row.job_id: row
        for row in DeadLetter.objects.using(using).filter(job_id__in=ids).only("id", "job_id", "name")
    }
    links = []
    for job_id in ids[:SHOWN]:
        if job_id in jobs:
            links.append(_job_link(jobs[job_id], site_name))
        elif job_id in dead:
            url = reverse(
                "admin:django_jobqueue_deadletter_change", args=[dead[job_id].pk], current_app=site_name
            )
            links.append(
                format_html(
                    '<a href="{}">#{} {}</a> (dead letter: retry it to go on)', url, job_id, dead[job_id].name
                )
            )
        else:
            links.append(format_html("#{} (gone)", job_id))
    return _listed(links, edges.count() if len(ids) > SHOWN else len(ids))


def waited_on_by(job: Job, site_name: str) -> SafeString | str:
    """Links to the jobs that wait for ``job``."""
    using = job._state.db
    edges = Dependency.objects.using(using).filter(dependency_id=job.pk)
    ids = list(edges.order_by("dependent_id").values_list("dependent_id", flat=True)[: SHOWN + 1])
    if not ids:
        return EMPTY
    jobs = Job.objects.using(using).filter(pk__in=ids[:SHOWN]).only("id", "name", "status").order_by("id")
    links = [_job_link(row, site_name) for row in jobs]
    return _listed(links, edges.count() if len(ids) > SHOWN else len(ids))


def _job_link(job: Job, site_name: str) -> SafeString:
    url = reverse("admin:django_jobqueue_job_change", args=[job.pk], current_app=site_name)
    return format_html('<a href="{}">#{} {}</a> ({})', url, job.pk, job.name, job.status)


def _listed(links: list[SafeString], total: int) -> SafeString:
    items = format_html_join("", "<li>{}</li>", ((link,) for link in links))
    more = format_html("<li>and {} more</li>", f"{total - len(links):,}") if total > len(links) else ""
    return format_html('<ul class="jq-dependencies">{}{}</ul>', items, more)
