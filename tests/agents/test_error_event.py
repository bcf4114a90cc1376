"""The seed's structured error for an exception: what a viewer may offer to retry."""

from __future__ import annotations

import pytest

from ors_lab.agents.errors import error_event
from ors_lab.protocol.errors import OutcomeUnknownError, ServerError


@pytest.mark.parametrize("status", [502, 503, 504])
def test_a_call_whose_outcome_is_unknown_is_never_retryable(status: int) -> None:
    """A first /call answered 5xx may have run its tool: its error event must not invite a retry."""
    event = error_event(OutcomeUnknownError("gateway", status_code=status), source="tool")
    assert event.error_type == "tool_error"
    assert event.retryable is False


@pytest.mark.parametrize(("status", "retryable"), [(429, True), (503, True), (400, False), (500, False)])
def test_a_server_error_is_retryable_by_its_status(status: int, retryable: bool) -> None:
    """Other server errors keep the status rule: 429 and 502-504 are retryable, the rest are not."""
    assert error_event(ServerError("x", status_code=status), source="tool").retryable is retryable
