"""How many rounds a progress watch may take: enough for the job's whole timeout, whatever the round length."""
import pytest
from ansible.errors import AnsibleFilterError

from watch_rounds import watch_rounds


@pytest.mark.parametrize("timeout, length, rounds", [
    (24 * 3600, 30, 2881),        # the model copy's defaults: a day in half-minute rounds
    (180 * 60, 60, 181),          # the flash-attn build's defaults
    (180 * 60, 30, 361),          # past the 200 that nested includes allowed
    (7 * 24 * 3600, 1, 604801),   # a week in one-second rounds
    (60, 7, 10),                  # a partial round counts
    (3600, 0.01, 360001),         # fractions of a second
])
def test_the_rounds_cover_the_whole_timeout_and_one_round_more(timeout, length, rounds):
    assert watch_rounds(timeout, length) == rounds


@pytest.mark.parametrize("timeout, length", [(3600, 0), (0, 30), (-1, 30), (3600, -5), ("soon", 30), (3600, None)])
def test_a_timeout_or_round_that_is_not_positive_is_refused(timeout, length):
    with pytest.raises(AnsibleFilterError, match="watch_rounds"):
        watch_rounds(timeout, length)
