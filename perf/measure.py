"""The Python side of src/measure/: percentiles by the nearest rank, as `tokenfeed bench`,
`tokenfeed inspect`, the C++ benchmarks and the module's stats() compute them, so that every
figure in perf/RESULTS.md is the same statistic whichever tool measured it.

    nearest_rank(values, q)   the element at index round(q * (n - 1)) of the sorted values
    median(values)            nearest_rank(values, 0.5)
"""
from __future__ import annotations

import math
from typing import Iterable


def nearest_rank(values: Iterable[float], q: float) -> float:
    """The q-quantile (0 <= q <= 1) by the nearest rank; NaN for no values."""
    s = sorted(values)
    if not s:
        return float("nan")
    i = int(math.floor(q * (len(s) - 1) + 0.5))
    return s[min(i, len(s) - 1)]


def median(values: Iterable[float]) -> float:
    return nearest_rank(values, 0.5)
