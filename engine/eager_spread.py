"""Where eager's own training step is no reference: its spread under rounding-level changes.

Note [Eager's own spread]
A training step can decide near-ties by rounding: a ReLU whose input is nearer zero than the forward's own error,
in a batch norm over few values or in half precision. The loss hardly notices which way it goes, but its
derivative jumps, and the channel's whole gradient moves with it. Eager's own step then moves by as much when
its inputs and parameters move by one ulp or its threads change, so "close to eager" and "as close to float64 as
eager" both ask for the luck of eager's rounding (the measurements: reports/eager_spread.md).
So where a step fails the check, eager's step is rerun as it was and repeated with every floating input and
parameter one ulp up, then down, and on the CPU with one more thread. The step's spread is the largest move of
any repeat at any tensor, relative to that tensor's largest value. A tensor that fails the check passes when the
spread is past the tensor's limit (`limit`: 5e-2 of its largest value in half precision, 1e-3 otherwise), eager's
own value there is farther than the limit from float64 (so eager is no better than that there), and ours is
within SPREAD_MULTIPLIER times the spread and never past MAX_SPREAD of the tensor's largest value, so a zeroed,
doubled or negated gradient always fails. The step's spread, not each tensor's: which tensors a flipped ReLU
reaches depends on where it flipped. Where the rerun as it was moves past the limit, the step is random, its
spread would be its randomness, and none is used. The verdict names every tensor passed this way, and the spread.

Note [Tensors eager cannot fix]
Past MAX_SPREAD the rule above has no answer: where eager's own repeats move a tensor by more than half its
largest value (a bf16 ResNet-50 step's last conv weight: 4x, both compilers 1.7x off eager's), eager's value
is one draw of rounding noise, and so is ours and Inductor's. Such a tensor is judged against float64 instead:
it passes when it is no farther from float64 than SPREAD_MULTIPLIER times the farthest of eager's own runs
(the step, its rerun, its repeats). A zeroed or doubled gradient then passes only where eager's own runs are
as far from the truth as that, i.e. where no step at this precision says more; without float64, it fails.
"""
from __future__ import annotations

import torch

HALF = (torch.float16, torch.bfloat16)
SPREAD_MULTIPLIER = 2.0  # ours may move up to this many times eager's own spread
MAX_SPREAD = 0.5  # ... and never more than half a tensor's largest value: a zeroed gradient is wrong


def limit_for(tensor: torch.Tensor) -> float:
    """How far, relative to its largest value, a tensor of a step may be from eager's by rounding alone."""
    return 5e-2 if tensor.dtype in HALF else 1e-3


def relative_error(expected: torch.Tensor, actual: torch.Tensor) -> tuple[float, float]:
    """The largest error of `actual`, and that relative to `expected`'s largest value."""
    error = float((actual.double() - expected.double()).abs().max()) if expected.numel() else 0.0
    error = error if error == error else float("inf")  # NaN where eager has none is the worst error
    scale = float(expected.double().abs().max()) if expected.numel() else 0.0
    return error, error / max(scale, 1e-6)


def eager_spread(eager: dict, rerun: list, repeats: list, limit: float | None = None) -> float:
    """The largest move of any repeat of eager's step at any tensor, relative to that tensor's largest eager value;
    0 where eager's step, rerun as it was, moves past `limit` (default: each tensor's own) itself (a random step)."""
    if not rerun or any(move > (limit if limit is not None else limit_for(eager[name]))
                        for name, move in moves(eager, rerun)):
        return 0.0
    return max((move for repeat in repeats for _, move in moves(eager, repeat)), default=0.0)


def moves(eager: dict, run: list) -> list[tuple[str, float]]:
    """How far each of `run`'s tensors [(name, tensor)] is from eager's, relative to eager's largest value."""
    return [(name, relative_error(eager[name], value)[1]) for name, value in run
            if isinstance(eager.get(name), torch.Tensor) and isinstance(value, torch.Tensor)
            and value.shape == eager[name].shape and value.is_floating_point()]


def rounding_decides(expected: torch.Tensor, reference, limit: float) -> bool:
    """Whether eager's own value is farther than `limit` from float64."""
    return isinstance(reference, torch.Tensor) and relative_error(reference, expected)[1] > limit


def within_spread(expected: torch.Tensor, actual: torch.Tensor, reference, spread: float) -> bool:
    """Whether a tensor that fails the check passes by the step's spread (the Note's rule)."""
    limit = limit_for(expected)
    relative = relative_error(expected, actual)[1]
    return spread > limit and rounding_decides(expected, reference, limit) and \
        relative <= min(SPREAD_MULTIPLIER * spread, MAX_SPREAD)


def unfixed_by_eager(expected: torch.Tensor, actual: torch.Tensor, reference, runs: list, spread: float) -> bool:
    """Whether a tensor that fails the check passes as one eager cannot fix (Note [Tensors eager cannot fix]):
    eager's own `runs` of it (rerun and repeats, tensors) move it past MAX_SPREAD, and ours is within
    SPREAD_MULTIPLIER times the farthest of eager's runs from float64 `reference`."""
    runs = [r for r in runs if isinstance(r, torch.Tensor) and r.shape == expected.shape]
    if spread <= limit_for(expected) or not isinstance(reference, torch.Tensor) or not runs:
        return False
    if max(relative_error(expected, run)[1] for run in runs) <= MAX_SPREAD:
        return False
    farthest = max(relative_error(reference, run)[0] for run in [expected, *runs])
    return relative_error(reference, actual)[0] <= SPREAD_MULTIPLIER * farthest


def runs_of(name: str, rerun: list, repeats: list) -> list:
    """Eager's own runs of one tensor: the rerun's and each repeat's value named `name`."""
    return [value for run in (rerun, *repeats) for n, value in run if n == name]


def nudge_(tensors, toward: float) -> None:
    """Move every tensor one ulp toward `toward` (+inf or -inf), in place (on the CPU, where nextafter has every
    floating type)."""
    with torch.no_grad():
        for tensor in tensors:
            tensor.copy_(torch.nextafter(tensor.cpu(), torch.tensor(toward, dtype=tensor.dtype)))
