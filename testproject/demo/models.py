from django.db import models


class Account(models.Model):
    """A user who signed up and must confirm their number with a one-time password."""

    phone = models.CharField(max_length=32, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    otp_sent_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.phone
