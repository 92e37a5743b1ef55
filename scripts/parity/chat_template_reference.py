"""transformers' `apply_chat_template`, the reference for Headroom's renderer.

Run by tests/chat_template.rs: reads one JSON object on stdin,
`{"tokenizer": DIR, "template": SOURCE, "cases": [{"messages", "tools", "kwargs"}]}`,
and prints a JSON list with `{"text", "ids"}` per case: the prompt as
transformers renders it (add_generation_prompt on) and its token ids.
"""

import json
import sys

from transformers import PreTrainedTokenizerFast

req = json.load(sys.stdin)
tok = PreTrainedTokenizerFast(tokenizer_file=f"{req['tokenizer']}/tokenizer.json")
out = []
for case in req["cases"]:
    common = dict(
        chat_template=req["template"],
        tools=case["tools"] or None,
        add_generation_prompt=True,
        **case["kwargs"],
    )
    text = tok.apply_chat_template(case["messages"], tokenize=False, **common)
    ids = tok.apply_chat_template(case["messages"], tokenize=True, return_dict=False, **common)
    out.append({"text": text, "ids": list(ids)})
json.dump(out, sys.stdout)
