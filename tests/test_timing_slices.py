"""Paired slices (Note [Interleaved slices] in engine/runtime/timing.py, the CPU tiling bench's timing), on a
simulated clock: runners whose calls cost a fixed time, and a load burst that slows whatever runs during it."""
import pytest

from engine.runtime.timing import paired_ratio, sliced_ms


class Machine:
    """A clock that a runner's call advances by its cost, times `slowdown` while a burst lasts."""

    def __init__(self, bursts=()):
        self.now = 0.0
        self.bursts = list(bursts)  # (start, end) in simulated seconds

    def clock(self) -> float:
        return self.now

    def runner(self, cost: float):
        def call():
            busy = any(start <= self.now < end for start, end in self.bursts)
            self.now += cost * (3.0 if busy else 1.0)
        return call


def test_every_runner_gets_the_same_slices_in_rotating_order():
    machine = Machine()
    order = []
    runners = {name: (lambda n=name, f=machine.runner(0.001): (order.append(n), f())) for name in "abc"}
    times, loads = sliced_ms(runners, (), min_time=0.1, repeats=3, slice_seconds=0.01, clock=machine.clock)
    assert {name: len(slices) for name, slices in times.items()} == {"a": 30, "b": 30, "c": 30}
    assert all(ms == pytest.approx(1.0) for slices in times.values() for ms in slices)
    assert loads
    firsts = order[4 * 3::10 * 3][:3]  # after 4 warm-up calls each, a round is 10 calls of each runner
    assert firsts == ["a", "b", "c"]


def test_a_load_burst_does_not_move_the_paired_ratio():
    """Ours costs 1.0 ms a call, theirs 1.05; a burst triples the cost of every call for a third of the run,
    and the slice at its edge is slowed for one runner and not the other. The fastest slice is the unloaded
    cost, and the median ratio of slices taken side by side is the ratio of the work."""
    machine = Machine(bursts=[(0.5, 1.5)])
    runners = {"ours": machine.runner(0.001), "theirs": machine.runner(0.00105)}
    times, _ = sliced_ms(runners, (), min_time=1.0, repeats=3, slice_seconds=0.02, clock=machine.clock)
    assert min(times["ours"]) == pytest.approx(1.0)
    assert max(times["ours"]) == pytest.approx(3.0)
    assert paired_ratio(times["ours"], times["theirs"]) == pytest.approx(1 / 1.05)
