"""The Winograd minimal filters of lowering/winograd.py against direct correlation."""

import numpy as np
import pytest

from nasir.lowering.schedule.winograd import minimal_filter


@pytest.mark.parametrize("m,r", [(4, 1), (4, 2), (4, 3), (4, 4), (4, 5), (2, 3), (3, 2)])
def test_minimal_filter_is_a_correlation(m, r):
    """AT ((G g) * (BT d)) = sum_k g[k] d[j + k] for j < m, from m + r - 1 products."""
    rng = np.random.default_rng(m * 10 + r)
    g, d = rng.standard_normal(r), rng.standard_normal(m + r - 1)
    at, gm, bt = minimal_filter(m, r)
    assert at.shape == (m, m + r - 1) and gm.shape == (m + r - 1, r) and bt.shape == (m + r - 1,) * 2
    np.testing.assert_allclose(at @ ((gm @ g) * (bt @ d)), np.correlate(d, g, "valid"), rtol=1e-12, atol=1e-12)


def test_minimal_filter_refuses_too_many_points():
    with pytest.raises(ValueError, match="needs 10 points"):
        minimal_filter(4, 7)
