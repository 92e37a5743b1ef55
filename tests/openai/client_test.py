"""The official `openai` Python client against `headroom serve` on loopback.

Run by src-tauri/tests/openai_client.rs, which starts the server on a tiny
demo model and passes its base URL and model id:

    python tests/openai/client_test.py BASE_URL MODEL CONTEXT_LIMIT

Each check prints one line, `ok <name>` or `FAIL <name>: why`; the last line
is a summary, and the exit status is non-zero if any check failed.
"""

import sys
import traceback

import openai

BASE_URL, MODEL, CONTEXT = sys.argv[1], sys.argv[2], int(sys.argv[3])
# No retries: a retried request would hide a wrong status. Any key: the
# server runs without one here and the client insists on sending something.
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=60)
MESSAGES = [{"role": "user", "content": "Say hello."}]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_error(exc_type, status, code, call):
    """`call` must raise `exc_type` with `status` and an OpenAI-style body."""
    try:
        call()
    except exc_type as e:
        check(e.status_code == status, f"status {e.status_code}, expected {status}")
        body = e.body
        check(isinstance(body, dict), f"error body is {body!r}")
        # The client unwraps {"error": {...}} into e.body.
        for key in ("message", "type", "param", "code"):
            check(key in body, f"'{key}' missing in {body}")
        check(body["code"] == code, f"code {body['code']!r}, expected {code!r}: {body}")
        check(e.code == code, f"client-side code {e.code!r}")
        return body
    raise AssertionError(f"no {exc_type.__name__} raised")


def models():
    listed = client.models.list()
    ids = [m.id for m in listed.data]
    check(MODEL in ids, f"{MODEL} not in {ids}")
    check(all(m.object == "model" for m in listed.data), "object != model")
    check(client.models.retrieve(MODEL).id == MODEL, "retrieve")


def plain_completion():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0)
    check(r.object == "chat.completion", r.object)
    check(r.model == MODEL, r.model)
    choice = r.choices[0]
    check(choice.message.role == "assistant", choice.message.role)
    check(isinstance(choice.message.content, str), repr(choice.message.content))
    check(choice.finish_reason in ("stop", "length"), choice.finish_reason)
    u = r.usage
    check(u.prompt_tokens > 0 and 1 <= u.completion_tokens <= 8, u)
    check(u.total_tokens == u.prompt_tokens + u.completion_tokens, u)
    stats = u.model_extra["headroom"]
    check(stats["batch"] == 1 and stats["context_tokens"] == u.prompt_tokens, stats)
    check(stats["ttft_ms"] > 0 and stats["prefill_tps"] > 0 and stats["e2e_tps"] > 0, stats)
    return choice.message.content, u.completion_tokens


def streamed_completion(plain):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)  # the client stops at `data: [DONE]`
    check(len(chunks) >= 3, f"{len(chunks)} chunks")
    check(all(c.object == "chat.completion.chunk" for c in chunks), "chunk objects")
    check(chunks[0].choices[0].delta.role == "assistant", chunks[0])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    check(len(reasons) == 1, reasons)
    usage = chunks[-1].usage
    check(chunks[-1].choices == [] and usage is not None, chunks[-1])
    # Greedy: the streamed text is the plain completion's, token for token.
    check((text, usage.completion_tokens) == plain, f"{(text, usage.completion_tokens)} != {plain}")
    check(usage.model_extra["headroom"]["ttft_ms"] > 0, usage)


def unknown_model():
    body = expect_error(
        openai.NotFoundError, 404, "model_not_found",
        lambda: client.chat.completions.create(model="nobody/nothing", messages=MESSAGES),
    )
    check(body["param"] == "model" and "nobody/nothing" in body["message"], body)


def malformed_json():
    body = expect_error(
        openai.BadRequestError, 400, None,
        lambda: client.post("/chat/completions", content=b'{"model": "x", "messages": [', cast_to=object),
    )
    check(body["type"] == "invalid_request_error" and "JSON" in body["message"], body)


def missing_messages():
    body = expect_error(
        openai.BadRequestError, 400, "missing_required_parameter",
        lambda: client.post("/chat/completions", body={"model": MODEL}, cast_to=object),
    )
    check(body["param"] == "messages", body)


def over_the_context_limit():
    long = [{"role": "user", "content": "lorem ipsum dolor sit amet " * CONTEXT}]
    for stream in (False, True):
        body = expect_error(
            openai.BadRequestError, 400, "context_length_exceeded",
            lambda: client.chat.completions.create(model=MODEL, messages=long, stream=stream),
        )
        check(f"{CONTEXT} tokens" in body["message"] and body["param"] == "messages", body)


def main():
    failed = []
    plain = None
    checks = [
        ("models", models),
        ("plain_completion", None),
        ("streamed_completion", lambda: streamed_completion(plain)),
        ("unknown_model_404", unknown_model),
        ("malformed_json_400", malformed_json),
        ("missing_messages_400", missing_messages),
        ("context_length_exceeded_400", over_the_context_limit),
    ]
    for name, fn in checks:
        try:
            if name == "plain_completion":
                plain = plain_completion()
            else:
                fn()
            print(f"ok {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the rest
            failed.append(name)
            print(f"FAIL {name}: {e!r}", flush=True)
            traceback.print_exc()
    print(f"openai {openai.__version__}: {len(checks) - len(failed)}/{len(checks)} passed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
