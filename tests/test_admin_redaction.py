"""``JOBQUEUE["REDACT_PAYLOAD_KEYS"]``: the admin shows named payload keys' values as redacted."""

from __future__ import annotations

import pytest
from django.test.utils import override_settings
from django.urls import reverse

from django_jobqueue.admin.display import REDACTED, redacted
from django_jobqueue.checks import check_jobqueue_settings
from django_jobqueue.models import DeadLetter, Job

PAYLOAD = {
    "user": "ada",
    "password": "pw-s3cret",
    "auth": {"Token": "tok-s3cret", "scopes": ["read"]},
    "attempts": [{"api_token": "not-named"}, {"TOKEN": "tok-2-s3cret"}],
}


def test_named_keys_are_redacted_at_any_depth_and_in_any_case():
    assert redacted(PAYLOAD, frozenset({"password", "token"})) == {
        "user": "ada",
        "password": REDACTED,
        "auth": {"Token": REDACTED, "scopes": ["read"]},
        "attempts": [{"api_token": "not-named"}, {"TOKEN": REDACTED}],
    }
    assert redacted(PAYLOAD, frozenset()) == PAYLOAD


@pytest.fixture
def superuser_client(client, django_user_model, queue):
    django_user_model.objects.create_superuser("root", password="pw")
    client.login(username="root", password="pw")
    return client


@override_settings(JOBQUEUE={"REDACT_PAYLOAD_KEYS": ["password", "token"]})
def test_the_admin_shows_no_redacted_value(superuser_client, queue):
    job = queue.push("tests.noop", PAYLOAD)
    claimed = queue.pull(worker_id="w")
    assert claimed is not None
    queue.fail(claimed, worker_id="w", error="boom")
    letter = DeadLetter.objects.get(job_id=job.pk)
    kept = queue.push("tests.noop", PAYLOAD)

    for url in (
        reverse("admin:django_jobqueue_job_change", args=[kept.pk]),
        reverse("admin:django_jobqueue_deadletter_change", args=[letter.pk]),
    ):
        page = superuser_client.get(url).content.decode()
        assert "s3cret" not in page, url
        assert REDACTED in page and "ada" in page and "not-named" in page, url
    assert Job.objects.get(pk=kept.pk).payload == PAYLOAD, "the row keeps the values"
    assert DeadLetter.objects.get(pk=letter.pk).payload == PAYLOAD


@pytest.mark.parametrize("value", ["password", ["password", 3], [""]])
def test_a_bad_redact_setting_is_reported(value):
    with override_settings(JOBQUEUE={"REDACT_PAYLOAD_KEYS": value}):
        assert "django_jobqueue.E008" in [message.id for message in check_jobqueue_settings()]
