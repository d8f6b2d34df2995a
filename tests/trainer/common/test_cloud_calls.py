"""Google API calls end in one line saying what was being done and why it failed: no
credentials is the user's to fix (exit 2), a refused or lost call a failed stage (exit 1)."""

from __future__ import annotations

import google.api_core.exceptions as api
import google.auth.exceptions as auth
import pytest
import requests

from trainer.common.cloud_calls import CloudCallError, CredentialsError, remote_call
from trainer.common.errors import InputError, StageError


def test_missing_credentials_say_how_to_get_them():
    with pytest.raises(CredentialsError) as info, remote_call("submitting the run"):
        raise auth.DefaultCredentialsError("Your default credentials were not found.")
    assert isinstance(info.value, InputError)
    assert str(info.value).startswith("submitting the run needs Google Cloud credentials: run "
                                      "`gcloud auth application-default login`")
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize("raised", [
    api.PermissionDenied("403 Permission 'aiplatform.pipelineJobs.create' denied\nmore"),
    requests.exceptions.ConnectionError("Max retries exceeded with url: /v1/projects"),
    TimeoutError("timed out"),
])
def test_a_refused_or_lost_call_is_one_line_naming_what_was_done(raised):
    with pytest.raises(CloudCallError) as info, remote_call("listing the schedules"):
        raise raised
    assert isinstance(info.value, StageError)
    message = str(info.value)
    assert message.startswith("listing the schedules failed: ") and "\n" not in message


def test_other_errors_pass_through():
    with pytest.raises(KeyError), remote_call("reading the quotas"):
        raise KeyError("a bug keeps its traceback")
