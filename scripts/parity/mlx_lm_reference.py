#!/usr/bin/env python3
"""mlx-lm's answer for the parity test (tests/parity.rs): for each model
folder, the chat-templated prompt ids, the prompt's last-position logits and
N greedily generated token ids, as one JSON object on stdout.

Generation goes through mlx-lm's own `generate_step` (the loop behind
`mlx_lm.generate`), which does not stop at EOS, so exactly N tokens are
compared even when a random-weight model would stop early.

    mlx_lm_reference.py --prompt TEXT [--system TEXT] --max-tokens N
        [--kv-bits B [--kv-group-size G] [--quantized-kv-start S]] DIR...

With --kv-bits the generation keeps its KV cache quantized the way
`generate_step` does (converted after the pass that reaches S positions);
the logits stay those of a plain forward pass over a float cache.
"""

import argparse
import json
import sys

import mlx.core as mx
import mlx_lm
from mlx_lm.sample_utils import make_sampler

# `mlx_lm.generate` is also a function name; the module holds generate_step.
generate_module = sys.modules["mlx_lm.generate"]

# mlx-lm 0.32.2's experts (switch_layers.py) pass `global_scale=` to
# `mx.gather_qmm`, a keyword mlx 0.32.2 does not have yet (0.32.4 does). It is
# only ever set for nvfp4 quantization, which nothing here uses, so drop it
# when it is None and the call is exactly mlx-lm's on the same libmlx the
# engine runs (README: "the reference for experts").
_gather_qmm = mx.gather_qmm


def _gather_qmm_without_global_scale(*args, global_scale=None, **kwargs):
    if global_scale is not None:
        raise NotImplementedError("a global scale (nvfp4) needs mlx >= 0.32.4")
    return _gather_qmm(*args, **kwargs)


mx.gather_qmm = _gather_qmm_without_global_scale


def reference(model_dir, prompt, system, max_tokens, kv):
    model, tokenizer = mlx_lm.load(model_dir)
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": prompt}
    ]
    # Rendered, then encoded without special tokens: the template already
    # wrote BOS and the role markers (what headroom does too).
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer.encode(text, add_special_tokens=False)

    logits = model(mx.array(prompt_ids)[None])[0, -1, :].astype(mx.float32)
    mx.eval(logits)

    tokens = []
    for token, _ in generate_module.generate_step(
        mx.array(prompt_ids), model, max_tokens=max_tokens, sampler=make_sampler(temp=0.0), **kv
    ):
        tokens.append(int(token))
    return {
        "prompt_ids": [int(t) for t in prompt_ids],
        "token_ids": tokens,
        "last_logits": logits.tolist(),
        "eos_token_ids": sorted(int(t) for t in tokenizer.eos_token_ids),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompt", required=True)
    p.add_argument("--system")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--kv-bits", type=int)
    p.add_argument("--kv-group-size", type=int, default=64)
    p.add_argument("--quantized-kv-start", type=int, default=0)
    p.add_argument("models", nargs="+")
    a = p.parse_args()
    kv = {}
    if a.kv_bits is not None:
        kv = {
            "kv_bits": a.kv_bits,
            "kv_group_size": a.kv_group_size,
            "quantized_kv_start": a.quantized_kv_start,
        }
    out = {
        "mlx_lm_version": mlx_lm.__version__,
        "mlx_version": mx.__version__,
        "models": {d: reference(d, a.prompt, a.system, a.max_tokens, kv) for d in a.models},
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
