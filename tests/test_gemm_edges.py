"""Edge cases of GEMM templates beyond test_templates.py's (issue 12, item 6): empty M, N or batch, scaled addmm
with broadcast biases, permuted batch operands, an output read transposed or used twice, integer matmuls and
convolutions that are no single GEMM. Each one matches eager with templates forced on, through the C++ backend
and the Triton interpreter; where a template cannot apply, the library call stays and the reason says why (an
empty output never reaches the choice: it is lowered to an empty tensor; empty K is in test_templates.py)."""
import pytest
import torch
import torch.nn.functional as F

import engine

TOLERANCE = dict(atol=2e-2, rtol=2e-2)


def _cases():
    torch.manual_seed(0)
    r = torch.randn
    return {
        "empty_m": (lambda a, b: torch.relu(a @ b), (r(0, 5), r(5, 7)), "empty output"),
        "empty_n": (lambda a, b: torch.relu(a @ b) + 1, (r(4, 5), r(5, 0)), "empty output"),
        "empty_batch": (lambda a, b: torch.tanh(torch.bmm(a, b)), (r(0, 3, 4), r(0, 4, 5)), "empty output"),
        "addmm_scaled": (lambda c, a, b: torch.relu(torch.addmm(c, a, b, beta=0.5, alpha=2.0)),
                         (r(19), r(33, 40), r(40, 19)), None),
        "addmm_column_bias": (lambda c, a, b: torch.sigmoid(torch.addmm(c, a, b)), (r(33, 1), r(33, 40), r(40, 19)),
                              None),
        "permuted_batch": (lambda a, b: F.gelu(a.permute(1, 0, 2) @ b), (r(17, 3, 31), r(3, 31, 18)), None),
        "transposed_b_batch": (lambda a, b: torch.relu(a @ b.transpose(1, 2)), (r(2, 17, 31), r(2, 18, 31)), None),
        "output_read_transposed": (lambda a, b: ((a @ b).t() + 1).contiguous(), (r(20, 31), r(31, 24)), None),
        "output_used_twice": (lambda a, b: (torch.relu(a @ b), (a @ b) * 2), (r(20, 31), r(31, 24)), None),
        "ragged_k_and_n": (lambda a, b, c: torch.relu(a @ b) * c, (r(37, 65), r(65, 33), r(33)), None),
        "integer": (lambda a, b: (a @ b) + 1, (torch.randint(-4, 4, (6, 5)), torch.randint(-4, 4, (5, 7))),
                    "int64"),
        "conv1x1_strided": (lambda x, w: torch.relu(F.conv2d(x, w, stride=2)), (r(2, 8, 6, 6), r(12, 8, 1, 1)),
                            "stride"),
        "conv1x1_grouped": (lambda x, w: torch.relu(F.conv2d(x, w, groups=2)), (r(2, 8, 5, 5), r(12, 4, 1, 1)),
                            "groups"),
        "conv1x1_sliced_input": (lambda x, w: torch.relu(F.conv2d(x[:, 2:], w)), (r(2, 10, 5, 6), r(12, 8, 1, 1)),
                                 None),
    }


CASES = _cases()


@pytest.mark.parametrize("backend", ["cpp", "triton"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gemm_edge_case_matches_eager(case, backend):
    fn, inputs, refusal = CASES[case]
    exploration = engine.explore(fn, inputs, backend=backend, templates="on", tolerance=TOLERANCE)
    assert exploration.verify.ok, exploration.verify
    choices = exploration.graphs[0].fusion.templates if exploration.graphs else []
    templates = [k for k in exploration.kernels if k.kind == "template"]
    if refusal is None:
        assert templates, [(k.name, k.kind) for k in exploration.kernels]
    elif refusal == "empty output":  # lowered to an empty tensor: no GEMM is left to choose a template for
        assert not templates and all(k.kind == "extern" for k in exploration.kernels), exploration.kernels
    else:
        assert not templates and choices and refusal in choices[0].reason, choices


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_transposed_read_of_the_output_is_no_epilogue(backend):
    """(a @ b).t() + 1 reads the tile at another element: the add runs as its own kernel, after the template."""
    fn, inputs, _ = CASES["output_read_transposed"]
    exploration = engine.explore(fn, inputs, backend=backend, templates="on", tolerance=TOLERANCE)
    (template,) = [k for k in exploration.kernels if k.kind == "template"]
    assert not template.template.fused_ops, template.template.fused_ops
    assert "pointwise" in [k.kind for k in exploration.kernels]
