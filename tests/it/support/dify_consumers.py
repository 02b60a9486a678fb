"""Replays how Dify consumes one tool session's output lines, as the daemon delivers them.

Input (stdin): JSON {"sessions": [[<the plugin's raw output lines of one session>], ...]}.
Output (stdout): JSON list, per session {"tool_node": {...outputs...}, "agent_app": str,
"agent_node": str, "agent_node_current": str, "records": [json.dumps(json_object,
ensure_ascii=False), ...], "fail_branch": {"error_type", "error_message"} or null}.

Written from these code paths (read, not copied):
- daemon: each `stream` chunk is decoded into ToolResponseChunk{type, message map, meta map}
  and re-encoded with json.Marshal, so map keys arrive sorted (Go maps).
- Dify workflow tool node (`_transform_message`): text concatenated, truthy json objects
  collected (default [{"data": []}]), variable messages (stream false) set by name;
  outputs = {"text", "files", "json", **variables}.
- Dify agent apps (ToolEngine.agent_invoke -> _convert_tool_response_to_str): text parts in
  order, any other non-JSON message as str(message); JSON parts json.dumps(ensure_ascii=False)
  appended after them unless byte-equal to a text part; joined with "".
- Agent node, function-calling strategy of dify-official-plugins (cot_agent <= 0.0.41):
  text as is, JSON as "tool response: <json>.", anything else "tool response: <repr>.".
  cot_agent >= 0.0.42 renders variable messages as "" (also replayed).
- A session error: the daemon forwards {"args","error_type","message"} as the text of a
  PluginInvokeError; the tool node's fail branch gets error_type "PluginInvokeError" and
  error_message from PluginInvokeError.to_user_friendly_error (core/plugin/impl/exc.py).
"""

import json
import sys


class _Model:
    """What pydantic v2 prints for a model: str() = "a=1 b='x'", repr() = "Name(a=1, b='x')"."""

    fields = ()

    def __init__(self, raw):
        for f in self.fields:
            setattr(self, f, raw.get(f, self.defaults.get(f)))

    defaults = {}

    def __str__(self):
        return " ".join(f"{f}={getattr(self, f)!r}" for f in self.fields)

    def __repr__(self):
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.fields)
        return f"{type(self).__name__}({inner})"


class TextMessage(_Model):
    fields = ("text",)


class JsonMessage(_Model):
    fields = ("json_object",)


class VariableMessage(_Model):
    fields = ("variable_name", "variable_value", "stream")
    defaults = {"stream": False}


MODELS = {"text": TextMessage, "json": JsonMessage, "variable": VariableMessage}


def daemon_reencode(chunk):
    """ToolResponseChunk through Go's json.Marshal: struct order, map keys sorted."""
    encoded = (
        '{"type":' + json.dumps(chunk["type"]) + ',"message":'
        + json.dumps(chunk.get("message"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        + ',"meta":' + json.dumps(chunk.get("meta"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        + "}"
    )
    return json.loads(encoded)


def session_error(lines):
    for line in lines:
        event = json.loads(line) if line.strip() else {}
        if event.get("event") == "session" and event["data"]["type"] == "error":
            return event["data"]["data"]
    return None


def fail_branch(error, plugin_name="stateful_tool"):
    if error is None:
        return None
    # What the daemon sends as the error text, parsed back by Dify (_get_error_object).
    inner = json.loads(json.dumps(error, sort_keys=True, separators=(",", ":")))
    message = (
        f"An error occurred in the {plugin_name}, "
        f"please contact the author of {plugin_name} for help, "
        f"error type: {inner.get('error_type', 'unknown')}, "
        f"error details: {inner.get('message', 'unknown')}"
    )
    return {"error_type": "PluginInvokeError", "error_message": message}


def messages(lines):
    out = []
    for line in lines:
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("event") != "session" or event["data"]["type"] != "stream":
            continue
        chunk = daemon_reencode(event["data"]["data"])
        model = MODELS.get(chunk["type"])
        if model is None:
            raise SystemExit(f"message type {chunk['type']!r} is not one this replay knows")
        out.append((chunk["type"], model(chunk["message"])))
    return out


def tool_node(msgs):
    text, json_list, variables = "", [], {}
    for kind, m in msgs:
        if kind == "text":
            text += m.text
        elif kind == "json":
            if m.json_object:
                json_list.append(m.json_object)
        elif kind == "variable":
            if m.stream:
                if not isinstance(m.variable_value, str):
                    raise SystemExit("stream variable with a non-string value")
                variables[m.variable_name] = variables.get(m.variable_name, "") + m.variable_value
            else:
                variables[m.variable_name] = m.variable_value
    return {"text": text, "files": [], "json": json_list or [{"data": []}], **variables}


def agent_app(msgs):
    parts, json_parts = [], []
    for kind, m in msgs:
        if kind == "text":
            parts.append(m.text)
        elif kind == "json":
            json_parts.append(json.dumps(m.json_object, ensure_ascii=False))
        else:
            parts.append(str(m))
    if json_parts:
        existing = set(parts)
        parts.extend(p for p in json_parts if p not in existing)
    return "".join(parts)


def agent_node(msgs, current):
    result = ""
    for kind, m in msgs:
        if kind == "text":
            result += m.text
        elif kind == "json":
            result += f"tool response: {json.dumps(m.json_object, ensure_ascii=False)}."
        elif kind == "variable" and current:
            result += ""
        else:
            result += f"tool response: {m!r}."
    return result


def replay(lines):
    msgs = messages(lines)
    return {
        "tool_node": tool_node(msgs),
        "agent_app": agent_app(msgs),
        "agent_node": agent_node(msgs, current=False),
        "agent_node_current": agent_node(msgs, current=True),
        "records": [json.dumps(m.json_object, ensure_ascii=False) for k, m in msgs if k == "json"],
        "fail_branch": fail_branch(session_error(lines)),
    }


def main():
    sessions = json.load(sys.stdin)["sessions"]
    json.dump([replay(lines) for lines in sessions], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
