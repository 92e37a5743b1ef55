"""The official `openai` client asks a bare `headroom serve` (the bundled
default model, SmolLM2-135M-Instruct) for what agents ask: JSON that follows
a schema, forced tool calls, and stop sequences.

Run by src-tauri/tests/openai_client.rs:

    python tests/openai/structured_test.py BASE_URL MODEL PER_SCHEMA

Each check prints `ok <name>` or `FAIL <name>: why`; the last line is a
summary, and the exit status is non-zero if any check failed.
"""

import json
import sys
import traceback

import jsonschema
import openai

BASE_URL, MODEL, PER_SCHEMA = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)

# Every string has a maxLength: a string a schema leaves unbounded is one a
# small model may repeat itself in until max_tokens (seen with SmolLM2-135M:
# a date repeated 20 times in a free "note"), which the constraint allows and
# ends as finish_reason "length"; bounded, the answer always ends.
SCHEMAS = {
    "nested_object": {
        "type": "object",
        "properties": {
            "person": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 40}, "city": {"type": "string", "maxLength": 40}},
                "required": ["name", "city"],
                "additionalProperties": False,
            }
        },
        "required": ["person"],
        "additionalProperties": False,
    },
    "array": {
        "type": "object",
        "properties": {"fruits": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 1, "maxItems": 4}},
        "required": ["fruits"],
        "additionalProperties": False,
    },
    "enum": {
        "type": "object",
        "properties": {"mood": {"enum": ["happy", "sad", "neutral"]}},
        "required": ["mood"],
        "additionalProperties": False,
    },
    "bounded_number": {
        "type": "object",
        "properties": {"age": {"type": "integer", "minimum": 0, "maximum": 120}, "score": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["age", "score"],
        "additionalProperties": False,
    },
    "required_fields": {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 40}, "done": {"type": "boolean"}, "note": {"type": "string", "maxLength": 80}},
        "required": ["title", "done"],
        "additionalProperties": False,
    },
}
PROMPTS = [
    "Describe a person you know as JSON.",
    "List some fruits as JSON.",
    "How do you feel today? Answer in JSON.",
    "Give an age and a score as JSON.",
    "Write a to-do item as JSON.",
]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                    "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "add", "description": "Adds two integers",
     "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"], "additionalProperties": False}}},
]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def ask_json(name, schema, i, stream):
    kwargs = dict(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
        max_tokens=200,
        # Sampled with a seed per request: twenty different answers, not one
        # twenty times. At 0.9 this 135M model sometimes wanders inside a
        # string it is free to make as long as it likes (the schema bounds no
        # length), and ends at max_tokens with finish_reason "length", as it
        # should; 0.3 keeps the answers varied and the strings sane.
        temperature=0.3,
        seed=i,
        response_format={"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
    )
    if stream:
        text, finish = "", None
        for chunk in client.chat.completions.create(stream=True, **kwargs):
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return text, finish
    reply = client.chat.completions.create(**kwargs)
    return reply.choices[0].message.content, reply.choices[0].finish_reason


def schemas_validate():
    for name, schema in SCHEMAS.items():
        for i in range(PER_SCHEMA):
            stream = i % 2 == 1
            text, finish = ask_json(name, schema, i, stream)
            check(finish == "stop", f"{name} #{i} (stream={stream}) finished {finish!r}: {text!r}")
            try:
                value = json.loads(text)
            except json.JSONDecodeError as e:
                raise AssertionError(f"{name} #{i} (stream={stream}) is not JSON ({e}): {text!r}")
            jsonschema.validate(value, schema)


def required_tool_calls():
    for i, content in enumerate(["What is the weather in Paris?", "What is 2 plus 3?"]):
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": content}], tools=TOOLS,
            tool_choice="required", max_tokens=120, temperature=0, seed=i,
        )
        choice = reply.choices[0]
        check(choice.finish_reason == "tool_calls", f"finish {choice.finish_reason!r}: {choice.message}")
        calls = choice.message.tool_calls or []
        check(calls, f"no tool_calls: {choice.message}")
        for call in calls:
            tool = next((t for t in TOOLS if t["function"]["name"] == call.function.name), None)
            check(tool is not None, f"call to an unknown tool {call.function.name!r}")
            jsonschema.validate(json.loads(call.function.arguments), tool["function"]["parameters"])


def a_named_tool_is_called():
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hello!"}], tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "add"}}, max_tokens=120, temperature=0,
    )
    calls = reply.choices[0].message.tool_calls or []
    check([c.function.name for c in calls] == ["add"], f"calls {calls}")
    jsonschema.validate(json.loads(calls[0].function.arguments), TOOLS[1]["function"]["parameters"])


def stop_cuts():
    base = dict(model=MODEL, messages=[{"role": "user", "content": "Tell me about the sea in three sentences."}],
                max_tokens=80, temperature=0)
    free = client.chat.completions.create(**base).choices[0].message.content
    check(len(free) >= 20, f"the free answer is too short to cut: {free!r}")
    # A stop from the middle of the greedy answer: the same answer, cut
    # just before it (whichever tokens it falls across).
    stop = free[len(free) // 2 : len(free) // 2 + 3]
    expected = free[: free.index(stop)]
    cut = client.chat.completions.create(stop=[stop, "\u2603never"], **base).choices[0]
    check(cut.finish_reason == "stop", f"finish {cut.finish_reason!r}")
    check(cut.message.content == expected, f"cut at {stop!r}: {cut.message.content!r}, expected {expected!r}")
    streamed = "".join(
        c.choices[0].delta.content or ""
        for c in client.chat.completions.create(stream=True, stop=[stop], **base)
        if c.choices
    )
    check(streamed == expected, f"streamed {streamed!r}, expected {expected!r}")


def bad_schema_400():
    try:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}},
        )
    except openai.BadRequestError as e:
        check(e.body.get("param") == "response_format.json_schema.schema", f"param in {e.body}")
        return
    raise AssertionError("an invalid schema was accepted")


def five_stops_400():
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], stop=list("abcde"))
    except openai.BadRequestError as e:
        check(e.body.get("param") == "stop", f"param in {e.body}")
        return
    raise AssertionError("five stops were accepted")


CHECKS = [schemas_validate, required_tool_calls, a_named_tool_is_called, stop_cuts, bad_schema_400, five_stops_400]
passed = 0
for c in CHECKS:
    try:
        c()
        print(f"ok {c.__name__}", flush=True)
        passed += 1
    except Exception as e:  # noqa: BLE001 - every failure is reported, then counted
        print(f"FAIL {c.__name__}: {e}", flush=True)
        traceback.print_exc()
print(f"structured: {passed}/{len(CHECKS)} passed")
sys.exit(0 if passed == len(CHECKS) else 1)
