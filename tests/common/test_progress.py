"""Progress reporting refuses an interval that would report nothing (issue 53)."""

import pytest

from keras_ctx.common import progress
from keras_ctx.common.errors import ConfigError

pytestmark = pytest.mark.backend_neutral("progress reporting's arguments, plain Python")


@pytest.mark.parametrize("every", [float("nan"), float("inf"), -1.0, "5"])
def test_an_interval_that_makes_no_sense_is_refused(every):
    with pytest.raises(ConfigError, match="`every` must be a finite number >= 0"):
        progress.Progress(print, every=every)


def test_a_zero_interval_reports_every_item():
    lines, now = [], iter(range(100))
    counted = progress.Progress(lines.append, every=0, clock=lambda: next(now))
    assert list(counted.count(range(3), "items")) == [0, 1, 2]
    assert len(lines) >= 3
