"""The console's capture form: limits typed in the dialog are the CLI's, refused in the CLI's words."""

from __future__ import annotations

import pytest

from appliance.capture.spec import Limits, check_limits
from appliance.core.errors import UsageError
from appliance.services.captures import CaptureForm, form_limits, start_form


def test_limits_typed_are_the_clis() -> None:
    assert form_limits(CaptureForm(snaplen="128", duration="2.5", count=" 10 ")) == Limits(128, 2.5, 10)
    assert form_limits(CaptureForm()) == Limits()
    with pytest.raises(UsageError, match="--count: 'ten' is not a whole number"):
        form_limits(CaptureForm(count="ten"))
    with pytest.raises(UsageError, match=r"--snaplen 5 is out of range: 14\.\.262144 bytes"):
        check_limits(form_limits(CaptureForm(snaplen="5")))  # the range is the service's, checked at start


def test_a_form_without_a_port_is_refused_before_anything_is_looked_at() -> None:
    with pytest.raises(UsageError, match="--port: choose a port to capture on"):
        start_form(None, CaptureForm(snaplen="128"))  # type: ignore[arg-type]  # no host is reached
