"""Statistics the benchmarks share."""

from __future__ import annotations

import random
import statistics


def median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the median of `values` (fixed seed: reruns print the same).

    Host-bound timings on the GPU machine move by more than the differences we look for from
    batch to batch, so a median alone says little; its interval says whether a target is met.
    """
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]
