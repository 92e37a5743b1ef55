#!/usr/bin/env python3
"""A tiny MCP server over stdio for Headroom's tests, standard library only,
so hostile behaviour is one argument away. Usage: fake_server.py [MODE]

MODE (how it starts): ok (default) | crash (says why on stderr, exits 1) |
garbage (writes non-JSON, then waits) | silent (never answers initialize).

Tools (once started): echo {text}, secret (a result holding an API key),
big (a 10 MB result), hang (never answers), exit (dies mid-call), fail
(an isError result)."""
import json
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "ok"
SECRET = "the deploy key is sk-proj-4fZq8T2mLw9RbX7yKc3VnE6pHs1Ud0Ja"

TOOLS = [
    {"name": "echo", "description": "Says the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 20}},
                     "required": ["text"], "additionalProperties": False}},
    {"name": "secret", "description": "Reads the deploy configuration.",
     "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "big", "description": "Returns a lot.", "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "exit", "description": "Exits mid-call.", "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "fail", "description": "Fails.", "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}},
]


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def text(id_, t, is_error=False):
    send({"jsonrpc": "2.0", "id": id_, "result": {"content": [{"type": "text", "text": t}], "isError": is_error}})


if MODE == "crash":
    sys.stderr.write("fake_server: FAKE_TOKEN is not set\n")
    sys.exit(1)
if MODE == "garbage":
    sys.stdout.write("this is not json-rpc\n{{{\n")
    sys.stdout.flush()

for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    method, id_ = msg.get("method"), msg.get("id")
    if id_ is None:
        continue  # a notification
    if method == "initialize":
        if MODE in ("silent", "garbage"):
            continue
        send({"jsonrpc": "2.0", "id": id_, "result": {
            "protocolVersion": msg.get("params", {}).get("protocolVersion", "2025-06-18")
            if msg.get("params", {}).get("protocolVersion") in ("2024-11-05", "2025-03-26", "2025-06-18") else "2025-06-18",
            "capabilities": {"tools": {}}, "serverInfo": {"name": "fake", "version": "1"}}})
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": id_, "result": {}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id_, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments") or {}
        if name == "echo":
            text(id_, "echo: " + str(args.get("text", "")))
        elif name == "secret":
            text(id_, SECRET)
        elif name == "big":
            text(id_, "x" * (10 * 1024 * 1024))
        elif name == "hang":
            pass
        elif name == "exit":
            sys.stderr.write("fake_server: lost my database connection\n")
            sys.stderr.flush()
            sys.exit(3)
        elif name == "fail":
            text(id_, "no such file: /nope", is_error=True)
        else:
            send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32602, "message": "unknown tool " + name}})
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "no method " + method}})
while MODE == "silent":
    time.sleep(1)
