# SPDX-License-Identifier: Apache-2.0
import pytest

from chargeonce import (BusyError, ChargeonceConnectionError, OverloadedError, RequestTimeoutError,
                        RetryPolicy, StorageUnavailableError)


def policy(**kw):
    return RetryPolicy(random=lambda: 0.0, sleep=lambda s: None, **kw)


def test_the_delay_doubles_from_the_base_up_to_the_maximum():
    p = policy(base_delay=0.1, max_delay=0.5)
    assert [p.delay(n) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_jitter_takes_up_to_its_share_off_the_delay():
    p = RetryPolicy(base_delay=1.0, max_delay=4.0, jitter=0.5, random=lambda: 1.0)
    assert p.delay(1) == pytest.approx(0.5)


def test_retry_after_is_a_floor_bounded_by_the_maximum():
    assert policy(max_delay=2.0).delay(1, retry_after=1) == pytest.approx(1.0)
    assert policy(max_delay=2.0).delay(1, retry_after=30) == pytest.approx(2.0)


@pytest.mark.parametrize("error", [
    StorageUnavailableError("storage_unavailable", "", 503),
    OverloadedError("overloaded", "", 503),
    RequestTimeoutError("request_timeout", "", 503),
    ChargeonceConnectionError("reset"),
])
def test_transient_errors_are_retried_until_the_attempts_are_used(error):
    p = policy(max_attempts=3)
    assert p.should_retry(error, 1) and p.should_retry(error, 2)
    assert not p.should_retry(error, 3)


def test_a_service_error_is_never_retried():
    assert not policy().should_retry(BusyError("busy", "", 409), 1)


def test_never_retries_nothing():
    assert not RetryPolicy.never().should_retry(ChargeonceConnectionError("x"), 1)


@pytest.mark.parametrize("kw", [{"max_attempts": 0}, {"base_delay": 3, "max_delay": 2},
                                {"jitter": 1.5}])
def test_a_policy_out_of_range_is_refused(kw):
    with pytest.raises(ValueError):
        RetryPolicy(**kw)
