"""Per-device random number generators."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from torch_fl import _C
from torch_fl.flagos._device import DeviceLike, _is_in_bad_fork, device_count, device_index


def _unless_in_bad_fork(fn: Callable[..., None]) -> Callable[..., None]:
    """Seeding does nothing in a process forked after the device runtime started, as with
    torch.cuda (whose queued seeding never runs there): DataLoader workers seed every device
    module, and the device cannot be used in them."""

    @functools.wraps(fn)
    def seeding(*args: object, **kwargs: object) -> None:
        if not _is_in_bad_fork():
            fn(*args, **kwargs)

    return seeding


# One Python object per device's default generator, as torch.cuda.default_generators holds:
# `default_generator(0) is default_generator(0)`. setdefault keeps the first of two racing
# threads' objects (both wrap the same C++ generator).
_default_generators: dict[int, torch.Generator] = {}


def default_generator(device: DeviceLike = None) -> torch.Generator:
    index = device_index(device, current_ok=False)
    generator = _default_generators.get(index)
    if generator is None:
        generator = _default_generators.setdefault(index, _C._default_generator(index))
    return generator


def get_rng_state(device: DeviceLike = "flagos") -> torch.Tensor:
    return default_generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "flagos") -> None:
    default_generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


@_unless_in_bad_fork
def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    default_generator(None).manual_seed(int(seed))


@_unless_in_bad_fork
def manual_seed_all(seed: int) -> None:
    for index in range(device_count()):
        default_generator(index).manual_seed(int(seed))


@_unless_in_bad_fork
def seed() -> None:
    """Seeds the current device's generator with a random number."""
    default_generator(None).seed()


@_unless_in_bad_fork
def seed_all() -> None:
    first = default_generator(0)
    first.seed()
    for index in range(1, device_count()):
        default_generator(index).manual_seed(first.initial_seed())


def initial_seed() -> int:
    return default_generator(None).initial_seed()
