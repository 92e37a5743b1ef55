#!/usr/bin/env python3
"""Builds a tiny random-weight model with mlx-lm 0.32.2's own classes, for
the parity tests of the architectures whose reference must not come from
the project's own writer (tests/parity.rs): instantiates mlx-lm's `Model`
for ARCH, gives every parameter random values (norm weights too, so that a
wrong `1 + weight` or a skipped norm shows), casts to bf16 as mlx-community
checkpoints are (the gated delta net's A_log stays f32, as mlx-lm's
`cast_predicate` keeps it), quantizes with mlx-lm's `quantize_model` (and
the model's own `quant_predicate`: routers at 8 bits) unless --bits 16, and
saves with mlx-lm's `save_model` / `save_config`: the mlx-community layout.
The tokenizer files come from --tokenizer-from (the project's demo
tokenizer), whose vocabulary size is --vocab.

    mlx_lm_build.py --arch ARCH --bits 4|8|16 --vocab N --tokenizer-from DIR OUT
"""

import argparse
import shutil
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

ATTENTION = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16)


def config(arch, vocab):
    if arch == "qwen3_moe":
        # Layer 0 has experts, layer 1 the dense MLP (mlp_only_layers).
        return dict(
            model_type=arch, num_hidden_layers=2, rms_norm_eps=1e-6, vocab_size=vocab, rope_theta=1e6,
            tie_word_embeddings=False, max_position_embeddings=4096, num_experts=8, num_experts_per_tok=2,
            decoder_sparse_step=1, mlp_only_layers=[1], moe_intermediate_size=64, norm_topk_prob=True, **ATTENTION,
        )
    if arch == "gemma3_text":
        # A window of 16 positions: the prompt overflows it (window mask),
        # and decoding goes round the ring. Layers 1 and 3 are global.
        return dict(
            model_type=arch, num_hidden_layers=4, rms_norm_eps=1e-6, vocab_size=vocab, rope_theta=1e6,
            rope_local_base_freq=10000.0, query_pre_attn_scalar=16, sliding_window=16, sliding_window_pattern=2,
            max_position_embeddings=4096, **ATTENTION,
        )
    if arch in ("qwen3_5", "qwen3_5_moe"):
        # Layers 0 and 2 are gated delta nets, 1 and 3 full attention.
        text = dict(
            model_type=arch, num_hidden_layers=4, rms_norm_eps=1e-6, vocab_size=vocab, max_position_embeddings=4096,
            tie_word_embeddings=False, full_attention_interval=2, linear_num_value_heads=4, linear_num_key_heads=2,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            rope_parameters={"type": "default", "rope_theta": 100000.0, "partial_rotary_factor": 0.25},
            **ATTENTION,
        )
        if arch == "qwen3_5":
            return text
        text.update(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64, shared_expert_intermediate_size=64)
        # As the multimodal checkpoint: the language model's config nested.
        return dict(model_type=arch, text_config=text)
    raise SystemExit(f"unknown arch {arch}")


def randomize(model):
    """Every parameter random: matrices as mlx initializes them, vectors
    (norms, biases, gates) around their initial value."""
    params = []
    for path, v in tree_flatten(model.parameters()):
        if v.ndim == 1 and not path.endswith("A_log"):
            v = v + 0.2 * mx.random.normal(v.shape)
        params.append((path, v))
    model.update(tree_unflatten(params))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", required=True)
    p.add_argument("--bits", type=int, choices=[4, 8, 16], required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--tokenizer-from", required=True)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("out")
    a = p.parse_args()
    mx.random.seed(a.seed)

    cfg = config(a.arch, a.vocab)
    model_class, args_class = _get_classes(cfg)
    model = model_class(args_class.from_dict(cfg))
    randomize(model)
    cast = getattr(model, "cast_predicate", lambda _path: True)
    model.update(
        tree_unflatten(
            [(k, v.astype(mx.bfloat16) if mx.issubdtype(v.dtype, mx.floating) and cast(k) else v)
             for k, v in tree_flatten(model.parameters())]
        )
    )
    if a.bits != 16:
        model, cfg = quantize_model(model, cfg, 64, a.bits, quant_predicate=getattr(model, "quant_predicate", None))
    mx.eval(model.parameters())

    out = Path(a.out)
    save_model(out, model)
    save_config(cfg, out / "config.json")
    for f in Path(a.tokenizer_from).iterdir():
        if f.is_file() and f.name != "config.json" and ".safetensors" not in f.name:
            shutil.copy(f, out / f.name)


if __name__ == "__main__":
    main()
