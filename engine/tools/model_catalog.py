"""The sweep's catalogue: architectures outside the zoo, built from their libraries' own code with random weights.

Note [Sweep catalogue]
The zoo (engine/tools/zoo.py) is what we tune on; the sweep is what we check ourselves against: models nobody
here wrote and nothing here was tuned for, chosen for the structures that broke us before — relative and
disentangled attention (DeBERTa, XLNet, MPNet), ALiBi (BLOOM), multi-query attention (Falcon, GPTBigCode),
mixture-of-experts routing (Mixtral, Qwen2-MoE), shifted-window and multi-axis attention (Swin, MaxViT),
grouped and depthwise convolutions (ResNeXt, MobileNet, EfficientNet-V2), Inception's pools and
concatenations, segmentation heads that resize back to the input, speech encoders. Each entry is a builder
`size -> (model, inputs)`; `size` is "real" (the GPU sweep: batch 8-32 images at 224, sequences of 256-512,
4 layers of width 768-1024, in half precision) or "tiny" (a few layers of width 64 in float32, so the same
code paths run on a 2-core CPU). A library that is missing, or that cannot build a model in its installed
version, makes a row "build-error" with the reason: never ours to fix, never hidden.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Callable

import torch

REAL, TINY = "real", "tiny"


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    library: str  # transformers | torchvision | timm
    family: str  # what structure it stands for (the table's column)
    dtype: torch.dtype  # at the real size; tiny runs float32
    build: Callable[[str], tuple]  # size -> (model, inputs)
    # other input sets: the model is compiled with dynamic=True and must run our kernels on each, matching eager
    dynamic_inputs: Callable[[str], list] | None = None

    def missing(self) -> str | None:
        if importlib.util.find_spec(self.library) is None:
            return f"{self.library} is not installed"
        return None


# --- Hugging Face -----------------------------------------------------------------------------------------------


class Logits(torch.nn.Module):
    """A causal LM called without a cache, returning its logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids, use_cache=False).logits


class Hidden(torch.nn.Module):
    """An encoder (text, image or audio) returning its last hidden state."""

    def __init__(self, model, key: str):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x, mask=None):
        kwargs = {self.key: x}
        if mask is not None:
            kwargs["attention_mask"] = mask
        out = self.model(**kwargs)
        return out.last_hidden_state if hasattr(out, "last_hidden_state") else out.logits


def _width(size: str, real: int) -> int:
    return real if size == REAL else 64


def decoder(model_type: str, keys: dict, extra: dict | None = None, tokens: int | None = None,
            layers: int | None = None):
    """A causal LM from its config class; `keys` maps our names (width, layers, heads, ffn, vocab, positions) to
    the config's own keyword names. `layers` replaces the depth at both sizes (else 4 real, 2 tiny); `extra` is
    applied last, so it may also replace the special token ids."""

    def build(size: str):
        import transformers

        width, depth, heads = (1024, 4, 16) if size == REAL else (64, 2, 4)
        values = dict(width=width, layers=layers or depth, heads=heads, ffn=width * 11 // 4,
                      vocab=32000 if size == REAL else 256, positions=1024)
        kwargs = {name: values[ours] for ours, name in keys.items()}
        kwargs.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # inside any vocabulary
        kwargs.update(extra or {})
        for key, value in list(kwargs.items()):
            if callable(value):
                kwargs[key] = value(heads, width)
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
        config.use_cache = False
        model = transformers.AutoModelForCausalLM.from_config(config)
        batch, length = (4, tokens or 512) if size == REAL else (2, 16)
        return Logits(model.eval()), (torch.randint(0, values["vocab"], (batch, length)),)

    return build


LLAMA_KEYS = dict(width="hidden_size", layers="num_hidden_layers", heads="num_attention_heads",
                  ffn="intermediate_size", vocab="vocab_size", positions="max_position_embeddings")
GPT2_KEYS = dict(width="n_embd", layers="n_layer", heads="n_head", vocab="vocab_size", positions="n_positions")
GQA = dict(num_key_value_heads=lambda heads, width: max(1, heads // 4))


def _other_lengths(size: str) -> list:
    """The dynamic decoder's other sequence lengths (its first is 128 real, 16 tiny)."""
    lengths, vocab = ((200, 317, 511), 32000) if size == REAL else ((23, 37), 256)
    batch = 4 if size == REAL else 2
    return [(torch.randint(0, vocab, (batch, n)),) for n in lengths]


def _encoder(model_type: str, keys: dict, extra: dict | None = None, masked: bool = True):
    def build(size: str):
        import transformers

        width, layers, heads = (768, 4, 12) if size == REAL else (64, 2, 4)
        values = dict(width=width, layers=layers, heads=heads, ffn=4 * width, vocab=8192 if size == REAL else 256,
                      positions=512)
        kwargs = {name: values[ours] for ours, name in keys.items()}
        for key, value in (extra or {}).items():
            kwargs[key] = value(heads, width) if callable(value) else value
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
        model = transformers.AutoModel.from_config(config)
        batch, tokens = (8, 256) if size == REAL else (2, 16)
        ids = torch.randint(0, values["vocab"], (batch, tokens))
        if not masked:
            return Hidden(model.eval(), "input_ids"), (ids,)
        mask = torch.ones(batch, tokens, dtype=torch.long)
        mask[batch // 2:, tokens * 3 // 4:] = 0
        return Hidden(model.eval(), "input_ids"), (ids, mask)

    return build


BERT_KEYS = dict(width="hidden_size", layers="num_hidden_layers", heads="num_attention_heads",
                 ffn="intermediate_size", vocab="vocab_size", positions="max_position_embeddings")


def _hf_vision(model_type: str, extra: Callable[[str], dict], image: int = 224, tiny_image: int = 32):
    def build(size: str):
        import transformers

        kwargs = extra(size)
        pixels = image if size == REAL else tiny_image
        kwargs.setdefault("image_size", pixels)
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
        model = transformers.AutoModel.from_config(config)
        batch = 16 if size == REAL else 2
        return Hidden(model.eval(), "pixel_values"), (torch.randn(batch, 3, pixels, pixels),)

    return build


def _whisper(size: str):
    import transformers

    width, layers, heads = (768, 4, 12) if size == REAL else (64, 2, 4)
    frames = 3000 if size == REAL else 64
    config = transformers.WhisperConfig(d_model=width, encoder_layers=layers, encoder_attention_heads=heads,
                                        decoder_layers=1, decoder_attention_heads=heads, encoder_ffn_dim=4 * width,
                                        decoder_ffn_dim=4 * width, num_mel_bins=80, max_source_positions=frames // 2)
    encoder = transformers.WhisperModel(config).get_encoder()
    batch = 8 if size == REAL else 2
    return Hidden(encoder.eval(), "input_features"), (torch.randn(batch, 80, frames),)


def _wav2vec2(size: str):
    import transformers

    width, layers, heads = (768, 4, 12) if size == REAL else (64, 2, 4)
    config = transformers.Wav2Vec2Config(hidden_size=width, num_hidden_layers=layers, num_attention_heads=heads,
                                         intermediate_size=4 * width, do_stable_layer_norm=True,
                                         feat_extract_norm="layer", conv_dim=(256,) * 7 if size == REAL else (32,) * 7)
    model = transformers.Wav2Vec2Model(config)
    batch, samples = (8, 32000) if size == REAL else (2, 4000)
    return Hidden(model.eval(), "input_values"), (torch.randn(batch, samples),)


# --- torchvision and timm ---------------------------------------------------------------------------------------


def _torchvision(name: str, image: int = 224, segmentation: bool = False, tiny_image: int = 64):
    def build(size: str):
        import torchvision

        kwargs = {"weights": None}
        if segmentation:
            kwargs.update(num_classes=21, weights_backbone=None)
            if name.startswith(("fcn", "deeplab")):
                kwargs["aux_loss"] = False
        else:
            kwargs["num_classes"] = 1000 if size == REAL else 10
        if name in ("inception_v3", "googlenet"):
            kwargs.update(aux_logits=False, init_weights=False)
        builder = getattr(torchvision.models.segmentation if segmentation else torchvision.models, name)
        model = builder(**kwargs).eval()
        if segmentation:
            model = SegmentationOut(model)
        pixels = image if size == REAL else tiny_image
        batch = (8 if segmentation else 16) if size == REAL else 2
        return model, (torch.randn(batch, 3, pixels, pixels),)

    return build


class SegmentationOut(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def _timm(name: str, image: int = 224, fixed_size: bool = False):
    def build(size: str):
        import timm

        pixels = image if size == REAL or fixed_size else 64
        kwargs = {"img_size": pixels} if fixed_size is False and _takes_img_size(name) else {}
        model = timm.create_model(name, pretrained=False, num_classes=1000 if size == REAL else 10, **kwargs).eval()
        batch = 16 if size == REAL else 2
        return model, (torch.randn(batch, 3, pixels, pixels),)

    return build


def _takes_img_size(name: str) -> bool:
    return name.startswith(("deit", "xcit", "mixer", "coat", "cait", "levit"))


# --- the catalogue ----------------------------------------------------------------------------------------------

BF16, FP16 = torch.bfloat16, torch.float16


def catalog() -> list[CatalogEntry]:
    d, e, v = decoder, _encoder, _hf_vision
    entries = [
        # decoders: bf16, 4 x 512 tokens, 4 layers of 1024
        CatalogEntry("hf_mistral", "transformers", "GQA, sliding window", BF16, d("mistral", LLAMA_KEYS, GQA)),
        CatalogEntry("hf_qwen2", "transformers", "GQA, qkv bias", BF16, d("qwen2", LLAMA_KEYS, GQA)),
        CatalogEntry("hf_gemma", "transformers", "GeGLU, scaled embedding", BF16,
                     d("gemma", LLAMA_KEYS, dict(GQA, head_dim=lambda h, w: w // h))),
        CatalogEntry("hf_gemma2", "transformers", "soft-capped logits, local/global", BF16,
                     d("gemma2", LLAMA_KEYS, dict(GQA, head_dim=lambda h, w: w // h))),
        CatalogEntry("hf_phi", "transformers", "partial rotary, parallel block", BF16, d("phi", LLAMA_KEYS)),
        CatalogEntry("hf_phi3", "transformers", "fused qkv and gate_up", BF16, d("phi3", LLAMA_KEYS)),
        CatalogEntry("hf_olmo", "transformers", "non-parametric LayerNorm", BF16, d("olmo", LLAMA_KEYS)),
        CatalogEntry("hf_starcoder2", "transformers", "GQA, sliding window, bias", BF16,
                     d("starcoder2", LLAMA_KEYS, GQA)),
        CatalogEntry("hf_gpt_neox", "transformers", "parallel residual, partial rotary", BF16,
                     d("gpt_neox", LLAMA_KEYS)),
        CatalogEntry("hf_falcon", "transformers", "multi-query attention", BF16,
                     d("falcon", dict(width="hidden_size", layers="num_hidden_layers", heads="num_attention_heads",
                                      vocab="vocab_size"), dict(multi_query=True, new_decoder_architecture=False))),
        CatalogEntry("hf_bloom", "transformers", "ALiBi attention", BF16,
                     d("bloom", dict(width="hidden_size", layers="n_layer", heads="n_head", vocab="vocab_size"))),
        CatalogEntry("hf_gpt_bigcode", "transformers", "multi-query attention", BF16,
                     d("gpt_bigcode", GPT2_KEYS, dict(multi_query=True))),
        CatalogEntry("hf_gptj", "transformers", "rotary on interleaved dims", BF16,
                     d("gptj", GPT2_KEYS, dict(rotary_dim=lambda h, w: w // h // 2))),
        CatalogEntry("hf_codegen", "transformers", "mp_num-split qkv", BF16,
                     d("codegen", dict(GPT2_KEYS, positions="n_positions"),
                       dict(rotary_dim=lambda h, w: w // h // 2, n_ctx=1024))),
        CatalogEntry("hf_mixtral", "transformers", "mixture of experts, top-2 of 8", BF16,
                     d("mixtral", LLAMA_KEYS, dict(GQA, num_local_experts=8, num_experts_per_tok=2,
                                                   intermediate_size=lambda h, w: w))),
        CatalogEntry("hf_qwen2_moe", "transformers", "mixture of experts, shared expert", BF16,
                     d("qwen2_moe", LLAMA_KEYS, dict(GQA, num_experts=8, num_experts_per_tok=2,
                                                     moe_intermediate_size=lambda h, w: w // 2,
                                                     shared_expert_intermediate_size=lambda h, w: w))),
        CatalogEntry("hf_llama_dynamic", "transformers", "dynamic sequence length 128-511", BF16,
                     d("llama", LLAMA_KEYS, GQA, tokens=128), dynamic_inputs=_other_lengths),
        # encoders: fp16, 8 x 256 tokens with padding, 4 layers of 768
        CatalogEntry("hf_deberta-v2", "transformers", "disentangled relative attention", FP16,
                     e("deberta-v2", BERT_KEYS, dict(relative_attention=True, position_buckets=256,
                                                     pos_att_type=["p2c", "c2p"]))),
        CatalogEntry("hf_deberta", "transformers", "disentangled attention (v1)", FP16,
                     e("deberta", BERT_KEYS, dict(relative_attention=True, pos_att_type=["p2c", "c2p"]))),
        CatalogEntry("hf_roberta", "transformers", "padding-offset positions", FP16, e("roberta", BERT_KEYS)),
        CatalogEntry("hf_electra", "transformers", "embedding projection", FP16,
                     e("electra", BERT_KEYS, dict(embedding_size=lambda h, w: w // 2))),
        CatalogEntry("hf_albert", "transformers", "shared layers, factorized embedding", FP16,
                     e("albert", BERT_KEYS, dict(embedding_size=128))),
        CatalogEntry("hf_mpnet", "transformers", "relative position buckets", FP16, e("mpnet", BERT_KEYS)),
        CatalogEntry("hf_convbert", "transformers", "span-based dynamic convolution", FP16,
                     e("convbert", BERT_KEYS)),
        CatalogEntry("hf_distilbert", "transformers", "no token types", FP16,
                     e("distilbert", dict(width="dim", layers="n_layers", heads="n_heads", ffn="hidden_dim",
                                          vocab="vocab_size", positions="max_position_embeddings"))),
        CatalogEntry("hf_xlnet", "transformers", "two-stream relative attention", FP16,
                     e("xlnet", dict(width="d_model", layers="n_layer", heads="n_head", ffn="d_inner",
                                     vocab="vocab_size"), masked=False)),
        # vision transformers and hybrids (Hugging Face)
        CatalogEntry("hf_swin", "transformers", "shifted-window attention", FP16,
                     v("swin", lambda size: {} if size == REAL else dict(embed_dim=32, depths=[1, 1, 1, 1],
                                                                          num_heads=[1, 2, 2, 4], window_size=2),
                       tiny_image=64)),
        CatalogEntry("hf_beit", "transformers", "relative position bias", FP16,
                     v("beit", lambda size: dict(num_hidden_layers=4, use_relative_position_bias=True)
                       if size == REAL else dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                 intermediate_size=128, patch_size=8,
                                                 use_relative_position_bias=True))),
        CatalogEntry("hf_segformer", "transformers", "efficient attention, mix-FFN", FP16,
                     v("segformer", lambda size: {} if size == REAL else dict(hidden_sizes=[16, 32, 64, 128],
                                                                              decoder_hidden_size=64))),
        CatalogEntry("hf_dinov2", "transformers", "layer scale, interpolated positions", FP16,
                     v("dinov2", lambda size: dict(num_hidden_layers=4, patch_size=14)
                       if size == REAL else dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                 patch_size=8))),
        CatalogEntry("hf_convnextv2", "transformers", "global response norm", FP16,
                     v("convnextv2", lambda size: {} if size == REAL else dict(hidden_sizes=[16, 32, 64, 128],
                                                                              depths=[1, 1, 1, 1]))),
        CatalogEntry("hf_mobilevit", "transformers", "convolution + unfolded attention", FP16,
                     v("mobilevit", lambda size: {} if size == REAL else dict(image_size=64))),
        CatalogEntry("hf_whisper_encoder", "transformers", "speech: conv stem + encoder", FP16, _whisper),
        CatalogEntry("hf_wav2vec2", "transformers", "speech: raw audio conv + encoder", FP16, _wav2vec2),
        # torchvision
        CatalogEntry("tv_swin_t", "torchvision", "shifted-window attention", FP16, _torchvision("swin_t")),
        CatalogEntry("tv_swin_v2_t", "torchvision", "log-spaced relative bias, cosine attention", FP16,
                     _torchvision("swin_v2_t", 256)),
        CatalogEntry("tv_maxvit_t", "torchvision", "multi-axis attention", FP16, _torchvision("maxvit_t", tiny_image=224)),
        CatalogEntry("tv_vit_b_16", "torchvision", "plain ViT", FP16, _torchvision("vit_b_16", tiny_image=224)),
        CatalogEntry("tv_resnext50", "torchvision", "grouped convolutions", FP16, _torchvision("resnext50_32x4d")),
        CatalogEntry("tv_inception_v3", "torchvision", "pools and concatenations", FP16,
                     _torchvision("inception_v3", 299, tiny_image=75)),
        CatalogEntry("tv_googlenet", "torchvision", "inception blocks", FP16, _torchvision("googlenet")),
        CatalogEntry("tv_densenet121", "torchvision", "dense concatenation", FP16, _torchvision("densenet121")),
        CatalogEntry("tv_mobilenet_v2", "torchvision", "depthwise, inverted residual", FP16,
                     _torchvision("mobilenet_v2")),
        CatalogEntry("tv_efficientnet_v2_s", "torchvision", "fused-MBConv, squeeze-excitation", FP16,
                     _torchvision("efficientnet_v2_s")),
        CatalogEntry("tv_shufflenet_v2", "torchvision", "channel shuffle", FP16, _torchvision("shufflenet_v2_x1_0")),
        CatalogEntry("tv_squeezenet", "torchvision", "fire modules, concatenation", FP16,
                     _torchvision("squeezenet1_1")),
        CatalogEntry("tv_vgg11_bn", "torchvision", "plain convolutions, big linear", FP16, _torchvision("vgg11_bn")),
        CatalogEntry("tv_mnasnet", "torchvision", "depthwise, NAS", FP16, _torchvision("mnasnet1_0")),
        CatalogEntry("tv_fcn_resnet50", "torchvision", "segmentation head, resize to input", FP16,
                     _torchvision("fcn_resnet50", segmentation=True)),
        CatalogEntry("tv_deeplabv3_mobilenet", "torchvision", "atrous pyramid, resize", FP16,
                     _torchvision("deeplabv3_mobilenet_v3_large", segmentation=True)),
        CatalogEntry("tv_lraspp", "torchvision", "lite segmentation head", FP16,
                     _torchvision("lraspp_mobilenet_v3_large", segmentation=True)),
        # timm
        CatalogEntry("timm_deit_small", "timm", "distilled ViT", FP16, _timm("deit_small_patch16_224")),
        CatalogEntry("timm_mixer_b16", "timm", "MLP-mixer token mixing", FP16, _timm("mixer_b16_224")),
        CatalogEntry("timm_levit_128", "timm", "attention with conv stem, BN linear", FP16,
                     _timm("levit_128", fixed_size=True)),
        CatalogEntry("timm_poolformer_s12", "timm", "average-pool token mixer", FP16, _timm("poolformer_s12")),
        CatalogEntry("timm_cspdarknet53", "timm", "cross-stage partial", FP16, _timm("cspdarknet53")),
        CatalogEntry("timm_xcit_tiny", "timm", "cross-covariance attention", FP16, _timm("xcit_tiny_12_p16_224")),
        CatalogEntry("timm_ghostnet", "timm", "ghost modules", FP16, _timm("ghostnet_100")),
        CatalogEntry("timm_rexnet", "timm", "squeeze-excitation, ReLU6", FP16, _timm("rexnet_100")),
        CatalogEntry("timm_coat_lite", "timm", "conv-attention, factorized", FP16, _timm("coat_lite_tiny")),
        CatalogEntry("timm_edgenext", "timm", "split depthwise transpose attention", FP16,
                     _timm("edgenext_small")),
    ]
    return entries


def build(entry: CatalogEntry, size: str, device: str, seed: int = 0) -> tuple:
    """(model, inputs) on `device` in the entry's dtype (float32 when tiny), seeded."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, inputs = entry.build(size)
    dtype = entry.dtype if size == REAL else torch.float32
    model = model.to(device=device, dtype=dtype)
    inputs = tuple(x.to(device=device, dtype=dtype) if x.is_floating_point() else x.to(device) for x in inputs)
    return model, inputs


def by_name() -> dict[str, CatalogEntry]:
    return {entry.name: entry for entry in catalog()}
