"""Triton launch configurations: block sizes and warps per kernel form, for the GPU and for the interpreter.

Forms (Note [Triton kernel shapes] in triton/kernel.py; tilings in engine/schedule/tiling.py):
  pointwise   1-D blocks of XBLOCK outputs
  tiled       2-D [YBLOCK, XBLOCK] tiles of a pointwise kernel whose reads and writes run along different
              output dims (Note [Tiling from strides])
  persistent  [XBLOCK rows, RBLOCK >= the row] in registers
  looped      [XBLOCK rows, RBLOCK] walked along the row
  column      looped, with many outputs a tile (XBLOCK) and a few reduction steps (RBLOCK): the reads are
              contiguous along the outputs (a reduction over a non-innermost axis)
"""
from __future__ import annotations

from dataclasses import dataclass

import sympy

from engine.schedule.kernel_plan import PERSISTENT_ROW

PERSISTENT_LIMIT = PERSISTENT_ROW  # the scheduler's persistent rows are this form's (Note [Persistent chains])
GPU_SMS = 132  # an H200's streaming multiprocessors: the column form wants at least a program for each
INTERPRETER_TILE = 1 << 15  # elements per program under the interpreter
# the column form counts bytes of its column reads (Note [Column config]): a program reads a line of each row
# (two from WIDE_ROW_BYTES rows) where there are outputs enough, never less than a sector, and at least
# COLUMN_STEP_BYTES a step (float32: 32 outputs x 64 steps, 8 outputs x 256 steps)
LINE_BYTES = 128
SECTOR_BYTES = 32
COLUMN_STEP_BYTES = 8192
WIDE_ROW_BYTES = 16384 * 4  # rows from this wide take two lines a program
MANY_COLUMNS = 65536  # outputs from which a column program is 64 outputs x 8 steps (Note [Column config])


# a scan kernel's tile is a reduction's: one block a row, or steps along it (Note [Scans in Triton])
SCAN_FORMS = {"scan": "persistent", "scan_looped": "looped"}


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@dataclass(frozen=True)
class LaunchConfig:
    XBLOCK: int
    RBLOCK: int | None = None
    num_warps: int = 4
    YBLOCK: int | None = None  # the tiled form's second tile side

    def kwargs(self) -> dict:
        values = {"XBLOCK": self.XBLOCK, "num_warps": self.num_warps}
        if self.RBLOCK is not None:
            values["RBLOCK"] = self.RBLOCK
        if self.YBLOCK is not None:
            values["YBLOCK"] = self.YBLOCK
        return values

    def text(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.kwargs().items())


def static_int(expr) -> int | None:
    expr = sympy.sympify(expr)
    return int(expr) if expr.is_Integer else None


def choose_config(form: str, rows, red, interpreter: bool, itemsize: int = 4) -> LaunchConfig:
    """Block sizes and warps from the kernel's form and sizes (a symbolic size counts as large). For the
    tiled form `rows` and `red` are the Y and X extents. `itemsize`: the column form's element size in bytes
    (its narrowest column read, engine/schedule/split.column_itemsize); other forms count values."""
    form = SCAN_FORMS.get(form, form)
    rows, red = static_int(rows), static_int(red)
    most_rows = next_power_of_2(rows) if rows is not None else 1 << 30  # no block beyond the rows
    most_red = next_power_of_2(red) if red is not None else 1 << 30
    if form == "tiled":
        # 64x64 tiles: each side at least one 128-byte line of float32 for coalescing, 4096 values over 8 warps
        xblock = min(1024 if interpreter else 64, most_red)
        yblock = min(max(1, INTERPRETER_TILE // xblock) if interpreter else 64, most_rows)
        return LaunchConfig(xblock, None, 4 if xblock * yblock <= 2048 else 8, yblock)
    if form == "column":
        if interpreter:
            xblock = min(most_rows, 1024)
            return LaunchConfig(xblock, max(1, min(most_red, INTERPRETER_TILE // xblock)), 4)
        if rows is None or rows >= MANY_COLUMNS:  # Note [Column config]
            return LaunchConfig(min(64, most_rows), min(8, most_red), 4)
        # many outputs a program (one 128-byte line or two of each row per reduction step), enough programs to
        # fill the SMs: few outputs (a batch-8 squeeze-excitation mean over 128 channels has 1024) take fewer a
        # program, down to one 32-byte sector of each row, so that there is a program for each SM
        xblock = min((LINE_BYTES if rows * itemsize < WIDE_ROW_BYTES else 2 * LINE_BYTES) // itemsize, most_rows)
        while xblock * itemsize > SECTOR_BYTES and -(-rows // xblock) < GPU_SMS:
            xblock //= 2
        # a narrower tile walks more reduction steps at once (at least COLUMN_STEP_BYTES a step): a program that
        # loops over a long column is bound by the latency of each step's loads, not by their width
        rblock = min(most_red, max(64, COLUMN_STEP_BYTES // (xblock * itemsize)))
        return LaunchConfig(xblock, rblock, 8 if xblock * itemsize >= LINE_BYTES else 4)
    if form == "pointwise":
        xblock = min(INTERPRETER_TILE if interpreter else 1024, max(16, most_rows))
        return LaunchConfig(xblock, None, max(1, min(4, xblock // 256)))
    if form == "persistent":
        rblock = next_power_of_2(red)
        if interpreter:
            return LaunchConfig(max(1, min(INTERPRETER_TILE // rblock, most_rows)), rblock, 4)
        # about 1024 values per program for short rows; long rows get more warps (timed on an H200:
        # 8192 rows of 512, 1024 and 8192 values do best with (2, 4), (1, 4) and (1, 16) as (XBLOCK, num_warps))
        xblock = max(1, min(1024 // rblock, most_rows, 64))
        return LaunchConfig(xblock, rblock, 4 if rblock <= 1024 else 8 if rblock <= 4096 else 16)
    if interpreter:  # looped
        return LaunchConfig(max(1, min(INTERPRETER_TILE // 4096, most_rows)), 4096, 8)
    return LaunchConfig(1, LOOPED_RBLOCK, 8)


# Note [Column config]
# A column reduction with many outputs (x.sum(1) of NCHW: 32*56*56 = 100352 outputs of 256 channels) fills
# the GPU with programs of 64 outputs whatever each one's tile; what is left to choose is how much a program
# reads a step. Measured on an H200 (session 3, do_bench, one run): 64 outputs x 64 steps over 8 warps read
# that sum at 2770 GB/s (0.0372 ms, eager's speed), Inductor's kernel at 3120-3270 GB/s (0.0316-0.0331 ms).
# Inductor's heuristic for outer reductions of more than 36K outputs is 64 outputs x 8 steps over 4 warps:
# one 16-byte load a thread a step, 34 registers (our kernel's sm_90 cubin), so 12 programs an SM and all
# 1568 programs of that sum resident at once, where 64 x 64 over 8 warps (35 registers, 6 programs an SM)
# runs in two waves. From MANY_COLUMNS outputs (1024 programs, about 8 an SM: some 32 KB of loads in flight
# an SM, what HBM needs) or a symbolic count, column kernels take 64 x 8 over 4 warps; fewer outputs keep
# the wider steps below, whose loads per program make up for fewer programs. The 64 x 8 choice is predicted
# from Inductor's, not yet timed on our kernel (no GPU in session 4; scripts/column_sweep.py times it).
# Fewer outputs keep the measured configs (column_sum 8192^2: 1.05 of Inductor; few_column_sum: 0.73).
# Those count bytes of each row (LINE_BYTES, SECTOR_BYTES, COLUMN_STEP_BYTES and WIDE_ROW_BYTES were 32, 8,
# 2048 and 16384 float32 values), so a float32 kernel keeps its config and a bfloat16 one reads as many bytes:
# a line of each row below 32768 outputs (values gave it 64 bytes below 16384), two lines and 16 KB a step
# from there, as float32 from 16384, and 8 KB a step in a narrowed tile (16 outputs x 256 steps for 4096
# bfloat16 outputs whose reduction is too short to split, where values gave 16 x 128). The stage 1 of the
# split of a 4096-column bfloat16 bias gradient (16384 outputs, Note [Column splits by bytes]) is 64 x 64 over
# 8 warps in either unit: the 8 KB a step and 256 programs of column_sum 8192^2. The many-outputs config stays
# in values: Inductor's 64 x 8 over 4 warps reads bfloat16 as well (the stage 1 of that bias gradient, 131072
# outputs of 256 rows each, took 16 us for 67 MB, 4.2 TB/s, session 7).

# Note [Looped row config]
# A row longer than PERSISTENT_LIMIT is walked by one program in steps of LOOPED_RBLOCK: 2048 float32 (8 KB)
# a step over 8 warps is 8 values a thread, so each thread issues two 128-bit loads per step and the
# accumulators stay in registers; rows of 32k-50k values take 16-25 steps a pass. One row a program gives
# thousands of programs for thousands of rows (an H200 has 132 SMs). Inductor's contiguous-reduction
# config for such rows is the same shape (XBLOCK=1, R0_BLOCK=2048); the difference that counts is the
# number of passes (Note [Online softmax]).
LOOPED_RBLOCK = 2048


def looped_config_reason(config: LaunchConfig) -> str:
    return (f"one row a program in steps of {config.RBLOCK} values over {config.num_warps} warps "
            f"(Note [Looped row config])")


def candidate_configs(form: str, rows, red, itemsize: int = 4) -> list[LaunchConfig]:
    """A few configs around the heuristic's, for autotuning on a GPU."""
    form = SCAN_FORMS.get(form, form)
    base = choose_config(form, rows, red, interpreter=False, itemsize=itemsize)
    if form == "pointwise":
        options = [base] + [LaunchConfig(x, None, w) for x, w in ((256, 2), (512, 4), (1024, 4), (2048, 8), (4096, 8))]
    elif form == "tiled":
        options = [base] + [LaunchConfig(x, None, w, y) for x, y, w in ((32, 32, 4), (64, 64, 8), (128, 32, 8),
                                                                        (32, 128, 8), (64, 16, 4))]
    elif form == "column":
        options = [base] + [LaunchConfig(x, r, w) for x, r, w in ((32, 32, 4), (64, 32, 8), (64, 64, 8),
                                                                  (128, 16, 8), (16, 128, 8), (64, 8, 4), (64, 4, 8))]
    elif form == "persistent":
        options = [base] + [LaunchConfig(x, base.RBLOCK, w) for x in (1, 2, 4, 8) for w in (4, 8, 16)
                            if x * base.RBLOCK <= 16384 and x * base.RBLOCK >= 32 * w]
    else:
        options = [base] + [LaunchConfig(1, r, w) for r, w in ((512, 4), (1024, 4), (1024, 8), (4096, 8), (4096, 16))]
    rows_p2 = next_power_of_2(static_int(rows)) if static_int(rows) is not None else None
    unique = []
    for option in options:
        too_wide = option.YBLOCK if form == "tiled" else option.XBLOCK
        if rows_p2 is not None and too_wide > max(rows_p2, 16 if form == "pointwise" else 1):
            continue
        if option not in unique:
            unique.append(option)
    return unique
