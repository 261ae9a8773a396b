"""Statistics the benchmarks share."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Hashable


def median_interval(values: list[float], resamples: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of the median of `values` (fixed seed: reruns print the same).

    Host-bound timings on the GPU machine move by more than the differences we look for from
    batch to batch, so a median alone says little; its interval says whether a target is met.
    """
    rng = random.Random(0)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]


def time_interleaved(
    runs: dict[Hashable, Callable[[], object]],
    rounds: int,
    iters: int,
    sync: Callable[[Hashable], None],
) -> dict[Hashable, list[float]]:
    """Seconds per call of each run, one sample per round: every round times `iters` calls of
    each run, the runs' order rotating from round to round so that none always goes first.
    `sync(key)` waits for the device work of run `key` before and after its calls."""
    times: dict[Hashable, list[float]] = {key: [] for key in runs}
    order = list(runs)
    for r in range(rounds):
        for key in order[r % len(order) :] + order[: r % len(order)]:
            fn = runs[key]
            sync(key)
            start = time.perf_counter()
            for _ in range(iters):
                fn()
            sync(key)
            times[key].append((time.perf_counter() - start) / iters)
    return times
