"""`bench train --profile`'s summary (engine/tools/train_profile.py), on the CPU: host events only."""
import torch

from engine.tools import train_profile


def test_kernel_kinds_from_names():
    assert train_profile.kernel_kind("triton_poi_fused_add_0") == "generated"
    assert train_profile.kernel_kind("kernel_4") == "generated"
    assert train_profile.kernel_kind("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT") == "library GEMM"
    assert train_profile.kernel_kind("void pytorch_flash::flash_bwd_dq_dk_dv_loop_kernel<...>") == "attention"
    assert train_profile.kernel_kind("Memcpy DtoD (Device -> Device)") == "copy/memset"
    assert train_profile.kernel_kind("void at::native::vectorized_elementwise_kernel<4, ...>") == "other ATen"


def test_profile_step_on_cpu(tmp_path):
    weight = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)

    def step():
        weight.grad = None
        (x @ weight).relu().sum().backward()

    profile = train_profile.profile_step(step, device="cpu", steps=2, warmup=1)
    assert profile["wall_ms"] > 0 and profile["kernels"] == 0 and profile["device_ms"] == 0
    assert "aten::mm" in profile["host_table"]
    text = train_profile.summary_text("mlp", "default", {"glassbox": profile})
    assert "glassbox" in text and "wall" in text
    written = train_profile.write_tables(tmp_path, "mlp.default", {"glassbox": profile})
    assert [p.name for p in written] == ["mlp.default.glassbox.profile.txt"]


def test_copies_are_attributed_to_their_caller():
    """A gradient that something else still holds is cloned by AccumulateGrad: the profile says who copied."""
    weight = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    held = []
    weight.register_hook(held.append)  # keeps a reference: AccumulateGrad cannot take the gradient over

    def step():
        weight.grad = None
        held.clear()
        (x @ weight).relu().sum().backward()

    profile = train_profile.profile_step(step, device="cpu", steps=2, warmup=1)
    rows = [r for r in profile["copies"] if "AccumulateGrad" in r["caller"]]
    assert rows and rows[0]["per_step"] == 1 and rows[0]["shape"] == "[16, 16]"
    assert "AccumulateGrad" in train_profile.summary_text("mlp", "default", {"glassbox": profile})
