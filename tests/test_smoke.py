from django_jobqueue.models import Job


def test_push_and_pull(queue, job_factory):
    job = job_factory(payload={"a": 1})
    pulled = queue.pull(worker_id="w")
    assert pulled is not None and pulled.pk == job.pk
    assert queue.ack(pulled, worker_id="w")
    assert Job.objects.get(pk=job.pk).status == "done"
