"""Matmul padding: a half-precision matmul whose K or N is not a multiple of 8 is padded with zeros to one.

Note [Padding misaligned matmuls]
cuBLAS picks its fast kernels only when every row of its fp16/bf16 operands starts on a 16-byte boundary, i.e.
when K and N (the leading dims of row-major A and B) are multiples of 8. GPT-2's LM head is the famous case:
[2048, 768] x [768, 50257] took an align-1 kernel, 1.88 ms on the H200, where Inductor pads the weight to 50264
columns once and its matmul takes 0.23 ms (issue 28). The rewrite is exact: zero rows/columns of K add nothing,
and padded columns of N are sliced off the result (a view, no copy):
    mm(a, b) -> mm(pad(a, K'), pad(b, K', N'))[:, :N]      addmm(c, a, b) likewise, c padded to N'
    bmm likewise per batch.
Whether it pays is a cost question -- the padded call plus the copies of the padded operands against the slow
call -- decided in one place, PaddingPolicy.decide (override: replace padding.POLICY, or GLASSBOX_PAD_MATMUL=
always|never|auto). A constant operand (a frozen weight, Note [Freezing]) is padded once, at compile time; a
parameter that is a graph input is padded on every call, a copy the cost check counts (freeze to avoid it).
The heuristic's figures are not measured here (no GPU on the machine that wrote it); they are the H200's data
sheet and the issue's GPT-2 timing, and "auto" pads only on CUDA in fp16/bf16.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

from engine.rewrite.edit import is_call, val
from engine.rewrite.freezing import constant_value, drop_unused_constants
from engine.rewrite.registry import RewriteGraph, register_rewrite

aten = torch.ops.aten
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default}


@dataclass
class PaddingPolicy:
    """When padding pays (Note [Padding misaligned matmuls]). Figures are per device, unmeasured estimates."""
    alignment_bytes: int = 16
    dense_flops: float = 600e12  # fp16/bf16 tensor-core rate an aligned cuBLAS GEMM reaches (H200 data sheet ~990)
    misaligned_fraction: float = 0.12  # of that rate an align-1 kernel reaches: 0.23 ms vs 1.88 ms (issue 28)
    copy_bytes_per_s: float = 3.0e12  # a pad copy's read + write rate (H200 HBM3e: 4.8 TB/s peak)
    launch_s: float = 4e-6  # one more kernel (the pad copy)

    def mode(self) -> str:
        return os.environ.get("GLASSBOX_PAD_MATMUL", "auto")

    def multiple(self, dtype: torch.dtype) -> int:
        return max(1, self.alignment_bytes // dtype.itemsize)

    def decide(self, batch: int, m: int, k: int, n: int, dtype: torch.dtype, device: str,
               copied_elements: int) -> tuple[bool, str]:
        """(pad?, why). copied_elements: what the pad copies each call (constant operands are padded once)."""
        mode = self.mode()
        if mode == "never":
            return False, "GLASSBOX_PAD_MATMUL=never"
        if mode == "always":
            return True, "forced (GLASSBOX_PAD_MATMUL=always): the mechanism, not the cost check, decided"
        if not device.startswith("cuda") or dtype not in (torch.float16, torch.bfloat16):
            return False, f"only CUDA fp16/bf16 matmuls pay for alignment (this is {device} {dtype})"
        step = self.multiple(dtype)
        kp, np_ = -(-k // step) * step, -(-n // step) * step
        slow = 2 * batch * m * k * n / (self.dense_flops * self.misaligned_fraction)
        fast = (2 * batch * m * kp * np_ / self.dense_flops
                + copied_elements * dtype.itemsize * 2 / self.copy_bytes_per_s
                + (self.launch_s if copied_elements else 0.0))
        verdict = fast < slow
        return verdict, (f"estimated {fast * 1e6:.1f} us padded (with {copied_elements} elements copied per call) "
                         f"vs {slow * 1e6:.1f} us misaligned: {'pads' if verdict else 'does not pay'} (unmeasured "
                         "estimate, PaddingPolicy)")


POLICY = PaddingPolicy()


@register_rewrite("pad_matmul", "fp16/bf16 matmul with K or N not a multiple of 8 -> zero-padded operands, the "
                                "result sliced back (Note [Padding misaligned matmuls])")
def pad_matmul(graph: RewriteGraph) -> None:
    for node in list(graph.graph.nodes):
        if is_call(node, MATMULS) and not node._erased:
            _pad(graph, node)


def _pad(graph: RewriteGraph, node: torch.fx.Node) -> None:
    is_addmm = node.target is aten.addmm.default
    a, b = node.args[1:3] if is_addmm else node.args[:2]
    a_val, b_val, out = val(a), val(b), val(node)
    if not all(isinstance(x, torch.Tensor) for x in (a_val, b_val, out)) or node.kwargs:
        return
    shapes = (*a_val.shape, *b_val.shape)
    if not all(isinstance(s, int) for s in shapes):
        return  # symbolic sizes: the alignment is not known at compile time
    step = POLICY.multiple(a_val.dtype)
    k, n = a_val.shape[-1], b_val.shape[-1]
    k_pad, n_pad = -k % step, -n % step
    if not (k_pad or n_pad):
        return
    batch = a_val.shape[0] if node.target is aten.bmm.default else 1
    m = a_val.shape[-2]
    constant_b = _constant(graph, b)
    copied = (a_val.numel() if k_pad else 0) + (0 if constant_b is not None else b_val.numel())
    pays, why = POLICY.decide(batch, m, k, n, a_val.dtype, str(out.device), copied)
    if not pays:
        if POLICY.mode() == "auto" and why.startswith("only CUDA"):
            return  # not a candidate at all: no refusal noise on every CPU matmul
        graph.refused([node], f"K={k}, N={n} are not multiples of {step}; {why}")
        return
    with graph.graph.inserting_before(node):
        made = []
        if k_pad:
            a = graph.add_node(aten.constant_pad_nd.default, (a, [0, k_pad]), {}, [node])
            made.append(a)
        if constant_b is not None:  # padded once, at compile time
            with unset_fake_temporarily():
                padded = torch.nn.functional.pad(constant_b, [0, n_pad, 0, k_pad]).contiguous()
            b = graph.constant_node(f"{node.name}_padded_weight", padded, [node])
        else:
            b = graph.add_node(aten.constant_pad_nd.default, (b, [0, n_pad, 0, k_pad]), {}, [node])
        made.append(b)
        if is_addmm:
            bias = node.args[0]
            constant_bias = constant_value(graph, bias)
            if n_pad and isinstance(constant_bias, torch.Tensor) and constant_bias.dim() >= 1 \
                    and constant_bias.shape[-1] == n:
                with unset_fake_temporarily():
                    padded = torch.nn.functional.pad(constant_bias, [0, n_pad]).contiguous()
                bias = graph.constant_node(f"{node.name}_padded_bias", padded, [node])
                made.append(bias)
            elif n_pad:
                bias = graph.add_node(aten.constant_pad_nd.default, (bias, [0, n_pad]), {}, [node])
                made.append(bias)
            matmul = graph.add_node(aten.addmm.default, (bias, a, b), {}, [node])
        else:
            matmul = graph.add_node(node.target, (a, b), {}, [node])
        made.append(matmul)
        result = matmul
        if n_pad:
            result = graph.add_node(aten.slice.Tensor, (matmul, -1, 0, n), {}, [node])
            made.append(result)
    node.replace_all_uses_with(result)
    graph.erase_unused([node])
    graph.matched([node], made, f"{result.name} = {node.target.__name__.split('.')[0]}(K {k}->{k + k_pad}, "
                                f"N {n}->{n + n_pad}){'[..., :%d]' % n if n_pad else ''}",
                  f"K={k}, N={n} are not multiples of {step} ({a_val.dtype}); {why}"
                  + ("; the constant weight is padded once, at compile time" if constant_b is not None else ""))
    drop_unused_constants(graph)


def _constant(graph: RewriteGraph, node) -> torch.Tensor | None:
    value = constant_value(graph, node)  # a frozen weight, or a view of one (a Linear's transposed weight)
    return value if isinstance(value, torch.Tensor) and value.dim() >= 2 else None
