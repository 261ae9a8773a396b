"""Random numbers on flagos: seeding, state save/restore, generators, per-device independence."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import torch_fl

F = torch.flagos
ON_CPU_ACCELERATOR = torch_fl.build_config.ACCELERATOR == "cpu"


def draw(device: str = "flagos", generator: torch.Generator | None = None) -> torch.Tensor:
    return torch.rand(64, device=device, generator=generator).cpu()


def test_manual_seed_reproduces() -> None:
    F.manual_seed(123)
    a = draw()
    b = draw()
    assert not torch.equal(a, b)  # the state advances
    F.manual_seed(123)
    assert torch.equal(draw(), a)
    assert torch.equal(draw(), b)
    F.manual_seed(124)
    assert not torch.equal(draw(), a)
    assert F.initial_seed() == 124


@pytest.mark.skipif(not ON_CPU_ACCELERATOR, reason="the cpu accelerator wraps a CPU generator")
def test_cpu_accelerator_stream_equals_cpu_generator() -> None:
    F.manual_seed(77)
    reference = torch.Generator().manual_seed(77)
    assert torch.equal(torch.randn(10, device="flagos").cpu(), torch.randn(10, generator=reference))
    assert torch.equal(
        torch.randint(0, 1000, (10,), device="flagos").cpu(),
        torch.randint(0, 1000, (10,), generator=reference),
    )


def test_get_set_rng_state() -> None:
    F.manual_seed(5)
    draw()
    state = F.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    after = [draw(), draw()]
    F.set_rng_state(state)
    assert torch.equal(draw(), after[0]) and torch.equal(draw(), after[1])
    # the saved state is a copy: drawing does not change it
    assert torch.equal(F.get_rng_state("flagos:0"), F.get_rng_state(0))
    F.set_rng_state(state, "flagos:0")
    assert torch.equal(draw(), after[0])


def test_set_rng_state_rejects_garbage() -> None:
    with pytest.raises(RuntimeError):
        F.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_torch_manual_seed_reaches_flagos() -> None:
    torch.manual_seed(2024)
    a = draw()
    for index in range(F.device_count()):
        assert F.default_generator(index).initial_seed() == 2024
    torch.manual_seed(2024)
    assert torch.equal(draw(), a)


def test_generator_object() -> None:
    g = torch.Generator("flagos")
    assert g.device == torch.device("flagos", 0)
    g.manual_seed(9)
    assert g.initial_seed() == 9
    a = draw(generator=g)
    g2 = torch.Generator(device="flagos").manual_seed(9)
    assert torch.equal(draw(generator=g2), a)
    state = g.get_state()
    b = draw(generator=g)
    g.set_state(state)
    assert torch.equal(draw(generator=g), b)
    # an explicit generator leaves the default one alone
    F.manual_seed(1)
    ref = draw()
    F.manual_seed(1)
    draw(generator=g)
    assert torch.equal(draw(), ref)


def test_generator_clone_state_via_graphsafe_or_get_state() -> None:
    g = torch.Generator("flagos").manual_seed(3)
    twin = torch.Generator("flagos")
    twin.set_state(g.get_state())
    assert torch.equal(draw(generator=g), draw(generator=twin))


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("device", ["flagos:0", "flagos:1"])
def test_generator_pickles_and_deep_copies_with_its_position(device: str) -> None:
    g = torch.Generator(device).manual_seed(7)
    draw(device, g)  # move it off its seed
    copied = copy.deepcopy(g)
    unpickled = pickle.loads(pickle.dumps(g))
    expected = draw(device, g)
    for other in (copied, unpickled):
        assert other.device == torch.device(device)
        assert other.initial_seed() == 7
        assert torch.equal(draw(device, other), expected)


@pytest.mark.skipif(not ON_CPU_ACCELERATOR, reason="cuda generators are Philox: offsets work")
def test_generator_offset_on_cpu_accelerator() -> None:
    g = torch.Generator("flagos").manual_seed(3)
    assert g.get_offset() == 0
    g.set_offset(0)  # what unpickling does; the state carries the position
    with pytest.raises(RuntimeError, match="no Philox offset.*get_state"):
        g.set_offset(5)


@pytest.mark.usefixtures("two_devices")
def test_per_device_generators_are_independent() -> None:
    F.manual_seed_all(11)
    state0 = F.get_rng_state(0)
    d1 = draw("flagos:1")
    assert torch.equal(F.get_rng_state(0), state0)  # drawing on flagos:1 left flagos:0 alone
    assert torch.equal(draw("flagos:0"), d1)  # same seed, same sequence, separate states
    state1 = F.get_rng_state(1)
    draw("flagos:0")
    assert torch.equal(F.get_rng_state(1), state1)
    assert not torch.equal(F.get_rng_state(0), state1)


@pytest.mark.usefixtures("two_devices")
def test_manual_seed_seeds_only_current_device() -> None:
    F.manual_seed_all(100)
    with F.device(1):
        F.manual_seed(7)
        assert F.initial_seed() == 7
    assert F.default_generator(0).initial_seed() == 100
    assert F.default_generator(1).initial_seed() == 7
    with F.device(1):
        from_current = draw()
    F.manual_seed(7)
    assert torch.equal(draw("flagos:0"), from_current)


@pytest.mark.usefixtures("two_devices")
def test_rng_state_all_roundtrip() -> None:
    F.manual_seed_all(8)
    states = F.get_rng_state_all()
    assert len(states) == F.device_count()
    first = [draw(f"flagos:{i}") for i in range(F.device_count())]
    F.set_rng_state_all(states)
    assert all(torch.equal(draw(f"flagos:{i}"), first[i]) for i in range(F.device_count()))


@pytest.mark.usefixtures("two_devices")
def test_generator_on_flagos1() -> None:
    g = torch.Generator("flagos:1").manual_seed(4)
    a = torch.randn(8, device="flagos:1", generator=g)
    assert a.device == torch.device("flagos", 1)
    g.manual_seed(4)
    assert torch.equal(torch.randn(8, device="flagos:1", generator=g).cpu(), a.cpu())


def test_seed_and_seed_all_pick_new_seeds() -> None:
    F.manual_seed(1)
    F.seed()
    s1 = F.initial_seed()
    F.seed()
    s2 = F.initial_seed()
    assert s1 != s2 and s1 != 1
    F.seed_all()
    seeds = {F.default_generator(i).initial_seed() for i in range(F.device_count())}
    assert len(seeds) == 1


def test_fork_rng_restores_flagos_state() -> None:
    F.manual_seed(21)
    expected = draw()
    F.manual_seed(21)
    with torch.random.fork_rng(devices=[0], device_type="flagos"):
        draw()
        draw()
    assert torch.equal(draw(), expected)


@pytest.mark.parametrize(
    "op",
    [
        lambda g: torch.normal(torch.zeros(50, device="flagos"), 1.0, generator=g),
        lambda g: torch.empty(50, device="flagos").bernoulli_(0.3, generator=g),
        lambda g: torch.empty(50, device="flagos").uniform_(-2, 2, generator=g),
        lambda g: torch.empty(50, device="flagos").exponential_(generator=g),
        lambda g: torch.multinomial(torch.ones(10, device="flagos"), 5, generator=g),
        lambda g: torch.randperm(30, device="flagos", generator=g),
    ],
    ids=["normal", "bernoulli_", "uniform_", "exponential_", "multinomial", "randperm"],
)
def test_random_ops_reproducible_with_generator_and_default(op) -> None:
    g = torch.Generator("flagos")
    results = []
    for _ in range(2):
        g.manual_seed(31)
        results.append(op(g).cpu())
    assert torch.equal(results[0], results[1])
    defaults = []
    for _ in range(2):
        F.manual_seed(31)
        defaults.append(op(None).cpu())
    assert torch.equal(defaults[0], defaults[1])


def test_dropout_masks_reproducible_with_torch_manual_seed() -> None:
    x = torch.ones(256, device="flagos")
    masks = []
    for _ in range(2):
        torch.manual_seed(0)
        masks.append(torch.nn.functional.dropout(x, 0.5, training=True).cpu())
    assert torch.equal(masks[0], masks[1])
    assert 0 < int((masks[0] == 0).sum()) < 256


def test_dropout_masks_follow_flagos_seed() -> None:
    x = torch.ones(256, device="flagos")
    F.manual_seed(0)
    a = torch.nn.functional.dropout(x, 0.5, training=True)
    F.manual_seed(0)
    b = torch.nn.functional.dropout(x, 0.5, training=True)
    assert torch.equal(a.cpu(), b.cpu())


def test_dropout_leaves_cpu_rng_alone() -> None:
    x = torch.ones(256, device="flagos")
    cpu_state = torch.get_rng_state()
    torch.nn.functional.dropout(x, 0.5, training=True)
    assert torch.equal(torch.get_rng_state(), cpu_state)


def test_flagos_rng_independent_of_cpu_rng() -> None:
    F.manual_seed(13)
    a = draw()
    F.manual_seed(13)
    torch.rand(100)  # the CPU default generator advancing must not move flagos
    torch.default_generator.manual_seed(999)
    assert torch.equal(draw(), a)


FLAGOS1_RANDOM_OPS = {
    "rand": lambda: torch.rand(8, device="flagos:1"),
    "randn": lambda: torch.randn(8, device="flagos:1"),
    "randint": lambda: torch.randint(0, 9, (8,), device="flagos:1"),
    "randperm": lambda: torch.randperm(8, device="flagos:1"),
    "uniform_": lambda: torch.empty(8, device="flagos:1").uniform_(),
    "normal_": lambda: torch.empty(8, device="flagos:1").normal_(),
    "bernoulli_": lambda: torch.empty(8, device="flagos:1").bernoulli_(0.5),
    "rand_like": lambda: torch.rand_like(torch.empty(8, device="flagos:1")),
    "multinomial": lambda: torch.multinomial(torch.ones(8, device="flagos:1"), 4),
}


@pytest.mark.usefixtures("two_devices")
@pytest.mark.parametrize("name", sorted(FLAGOS1_RANDOM_OPS))
def test_random_ops_on_flagos1_draw_from_flagos1_generator(name: str) -> None:
    op = FLAGOS1_RANDOM_OPS[name]
    F.manual_seed_all(55)
    state0, state1 = F.get_rng_state(0), F.get_rng_state(1)
    first = op()
    assert first.device == torch.device("flagos", 1)
    assert torch.equal(F.get_rng_state(0), state0)  # flagos:0's generator untouched
    assert not torch.equal(F.get_rng_state(1), state1)  # flagos:1's generator advanced
    F.set_rng_state(state1, 1)
    assert torch.equal(op().cpu(), first.cpu())  # and its state alone decides the numbers


@pytest.mark.parametrize(
    "op",
    [
        lambda g: torch.empty(3).random_(generator=g),
        lambda g: torch.empty(3).uniform_(generator=g),
        lambda g: torch.randperm(5, generator=g),
        lambda g: torch.multinomial(torch.ones(3), 2, generator=g),
        lambda g: torch.bernoulli(torch.full((3,), 0.5), generator=g),
    ],
    ids=["random_", "uniform_", "randperm", "multinomial", "bernoulli"],
)
def test_a_flagos_generator_for_cpu_tensors_is_named_as_the_problem(op) -> None:
    # DataLoader(shuffle=True, generator=torch.Generator("flagos")) does this; the message
    # names the generator (there is no flagos tensor to mix), in native kernels' words.
    with pytest.raises(
        RuntimeError, match="Expected a 'cpu' device type for generator but found 'flagos'"
    ):
        op(torch.Generator("flagos"))


@pytest.mark.usefixtures("two_devices")
def test_default_generators_start_from_a_system_seed(python_subprocess) -> None:
    # As CUDA's and CPU's: without a manual seed, each process and each device draws its own
    # numbers (a fixed start made every unseeded run, and both devices, identical).
    code = (
        "import torch, torch_fl\n"
        "print('SEEDS', torch.flagos.default_generator(0).initial_seed(),"
        " torch.flagos.default_generator(1).initial_seed())\n"
        "print('DRAWS', torch.rand(4, device='flagos:0').tolist(),"
        " torch.rand(4, device='flagos:1').tolist())\n"
    )
    runs = []
    for _ in range(2):
        done = python_subprocess(code)
        assert done.returncode == 0, done.stderr
        runs.append({line.split(" ", 1)[0]: line for line in done.stdout.splitlines()})
    fresh_seed = torch.Generator().initial_seed()  # what a generator nobody seeded starts from
    for run in runs:
        seeds = [int(s) for s in run["SEEDS"].split()[1:]]
        assert seeds[0] != seeds[1] and fresh_seed not in seeds
    assert runs[0]["SEEDS"] != runs[1]["SEEDS"]
    assert runs[0]["DRAWS"] != runs[1]["DRAWS"]
