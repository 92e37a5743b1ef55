#!/usr/bin/env python3
"""mlx-lm's answer on a GGUF file's own tensors, for the GGUF parity test
(tests/parity.rs): the last-position logits of the prompt and N greedily
generated token ids, as one JSON object on stdout.

mlx-lm 0.32.2 does not read GGUF files, so this does what a user converting
one would: MLX reads the tensors (`mx.load`, the same reader the engine
uses; Q4_0/Q4_1/Q8_0 come back as MLX's affine 4/8-bit, group 32), they are
renamed to the Hugging Face names, llama.cpp's rotary permutation of the q
and k rows is undone (llama only), and mlx-lm's own model class is built
from the metadata and runs them. The prompt is given as token ids, so only
the model is compared here (the tokenizer has its own parity test).

    gguf_reference.py --prompt-ids 1,2,3 --max-tokens N FILE.gguf...

prints {"FILE": {"token_ids": [...], "last_logits": [...]}, ...}.
"""

import argparse
import json
import sys

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models import llama, qwen2, qwen3

generate_module = sys.modules.get("mlx_lm.generate")
if generate_module is None:
    import mlx_lm.generate as generate_module  # noqa: E402
from mlx_lm.sample_utils import make_sampler  # noqa: E402

NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}


def hf_name(key):
    stem, part = key.rsplit(".", 1)
    if stem == "token_embd":
        return f"model.embed_tokens.{part}"
    if stem == "output_norm":
        return f"model.norm.{part}"
    if stem == "output":
        return f"lm_head.{part}"
    blk, n, tensor = stem.split(".", 2)
    assert blk == "blk", key
    return f"model.layers.{n}.{NAMES[tensor]}.{part}"


def unpermute(a, heads):
    rows, cols = a.shape
    return a.reshape(heads, rows // heads // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


def scalar(meta, key, default=None):
    if key not in meta:
        return default
    v = meta[key]
    return v.item() if isinstance(v, mx.array) else v


def load(path):
    arrays, meta = mx.load(path, return_metadata=True)
    arch = meta["general.architecture"]
    g = lambda k, d=None: scalar(meta, f"{arch}.{k}", d)  # noqa: E731
    heads, kv_heads = g("attention.head_count"), g("attention.head_count_kv")
    hidden = g("embedding_length")
    head_dim = g("attention.key_length", hidden // heads)
    common = dict(
        model_type=arch,
        hidden_size=hidden,
        num_hidden_layers=g("block_count"),
        intermediate_size=g("feed_forward_length"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        rms_norm_eps=g("attention.layer_norm_rms_epsilon"),
        vocab_size=arrays["token_embd.weight"].shape[0],
        rope_theta=g("rope.freq_base", 10000.0),
        tie_word_embeddings="output.weight" not in arrays,
        max_position_embeddings=g("context_length"),
    )
    if arch == "llama":
        model = llama.Model(llama.ModelArgs(head_dim=head_dim, **common))
    elif arch == "qwen2":
        model = qwen2.Model(qwen2.ModelArgs(**common))
    elif arch == "qwen3":
        model = qwen3.Model(qwen3.ModelArgs(head_dim=head_dim, **common))
    else:
        raise SystemExit(f"unsupported architecture {arch}")

    weights = {hf_name(k): v for k, v in arrays.items()}
    if arch == "llama":
        for name, value in list(weights.items()):
            if ".self_attn.q_proj." in name:
                weights[name] = unpermute(value, heads)
            elif ".self_attn.k_proj." in name:
                weights[name] = unpermute(value, kv_heads)
    # Quantized where the file is (the 4- or 8-bit layers each say by their packing).
    def predicate(path, module):
        if f"{path}.scales" not in weights:
            return False
        packed, width = weights[f"{path}.weight"].shape[-1], weights[f"{path}.scales"].shape[-1] * 32
        return {"group_size": 32, "bits": packed * 32 // width}

    nn.quantize(model, group_size=32, bits=4, class_predicate=predicate)
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt-ids", required=True)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("files", nargs="+")
    args = p.parse_args()
    ids = [int(t) for t in args.prompt_ids.split(",")]
    out = {}
    for file in args.files:
        model = load(file)
        logits = model(mx.array(ids)[None])[0, -1, :].astype(mx.float32)
        mx.eval(logits)
        tokens = [
            int(t)
            for t, _ in generate_module.generate_step(
                mx.array(ids), model, max_tokens=args.max_tokens, sampler=make_sampler(temp=0.0)
            )
        ]
        out[file] = {"token_ids": tokens, "last_logits": logits.tolist()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
