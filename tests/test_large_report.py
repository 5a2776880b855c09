"""Issue 26 item 9, the speed of `report` on a large file: each test fails where the fast code
gives anything other than the straightforward code it replaces. No timing is asserted."""

from __future__ import annotations

import math
from pathlib import Path

from gpuipc_bench import robust

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- robust's interval rank


def test_ci_rank_is_the_binomial_sum_of_math_comb():
    def direct(n, confidence):
        alpha, cdf, best = (1 - confidence) / 2, 0.0, None
        for k in range(n):
            cdf += math.comb(n, k) / 2 ** n
            if cdf > alpha:
                break
            best = k + 1
        return best

    for n in [*range(0, 80), 500, 2240]:
        for confidence in (0.9, 0.95, 0.99):
            assert robust.ci_rank(n, confidence) == direct(n, confidence), (n, confidence)
