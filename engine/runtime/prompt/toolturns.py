"""A conversation with tools, as a chat template can take it.

A template with its own call format renders earlier calls and tool results itself and is
handed the tools (or, when it does not describe tools, a system message that does). Any
other template gets the generic format: the tools in a system message, earlier calls as
generic JSON, tool results as user turns. :func:`conversation` decides; the formats
themselves are in :mod:`engine.runtime.prompt.calls`.
"""

from __future__ import annotations

import json

from engine.runtime.prompt.calls import GENERIC, Detected, Generic, ToolFormat
from engine.runtime.prompt.tools import Tool


def tools_prompt(fmt: ToolFormat, tools: tuple[Tool, ...]) -> str:
    """A system message describing ``tools`` for a template that writes calls in ``fmt``
    but does not describe tools itself (DeepSeek V3.1 and R1 distills)."""
    if fmt is GENERIC:
        return Generic.system_prompt(tools)
    listing = "\n".join(json.dumps(t.to_template()["function"], ensure_ascii=False) for t in tools)
    example = fmt.write([("tool_name", {"argument": "value"})])
    return f"You can call these tools:\n{listing}\n\nTo call one, write:\n{example}"


def with_system(messages: list[dict], text: str) -> list[dict]:
    """``messages`` with ``text`` added to (or as) the system message."""
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        return [{**messages[0], "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def generic_messages(messages: list[dict], tools: tuple[Tool, ...]) -> list[dict]:
    """``messages`` for a template that knows no tools: the tools described in the system
    message, earlier calls as the JSON the model was told to write, tool results as user
    turns (merged with a neighbouring user turn: many templates insist on alternation)."""
    out: list[dict] = []

    def add(role: str, content: str) -> None:
        if out and out[-1]["role"] == role and role != "system":
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + content}
        else:
            out.append({"role": role, "content": content})

    for m in messages:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            calls = [(c["function"]["name"], c["function"]["arguments"]) for c in m["tool_calls"]]
            add("assistant", (content + "\n" if content else "") + GENERIC.write(calls))
        elif role == "tool":
            name = f" ({m['name']})" if isinstance(m.get("name"), str) else ""
            add("user", f"Tool result{name}:\n{content}")
        elif role in ("user", "assistant") and isinstance(content, str):
            add(role, content)
        else:
            out.append(m)
    return with_system(out, Generic.system_prompt(tools)) if tools else out


def conversation(
    detected: Detected | None, messages: list[dict], offered: tuple[Tool, ...]
) -> tuple[list[dict], list[dict] | None, ToolFormat | None]:
    """How a (normalized) conversation meets a template whose call format is ``detected``
    (None: a template that knows no tools, such as llama.cpp's built-ins): the messages to
    render, the ``tools`` to hand the template (None: it is not given them) and the format
    the reply's calls are parsed in (None: no tools offered).

    A template with its own call format renders earlier calls and tool results itself and
    gets the tools (or, when it does not describe tools, a system message that does); any
    other template gets the generic format: the tools in a system message, earlier calls
    as generic JSON and tool results as user turns."""
    native = detected is not None and detected.knows_calls
    if not native:
        if offered or any(m.get("role") == "tool" or m.get("tool_calls") for m in messages if isinstance(m, dict)):
            messages = generic_messages(messages, offered)
        return messages, None, GENERIC if offered else None
    assert detected is not None
    if detected.format.one_call_per_turn:
        messages = one_call_per_turn(messages)
    if offered and not detected.describes_tools:
        messages = with_system(messages, tools_prompt(detected.format, offered))
    tools = [t.to_template() for t in offered] if offered and detected.describes_tools else None
    return messages, tools, detected.format if offered else None


def one_call_per_turn(messages: list[dict]) -> list[dict]:
    """``messages`` with each assistant turn of several calls given as one turn per call,
    each followed by its result (harmony's template renders only a turn's first call and
    names every result after the latest one)."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if not calls or len(calls) < 2:
            out.append(m)
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        results = messages[i + 1 : j]
        for k, c in enumerate(calls):
            out.append({**m, "tool_calls": [c], **({"content": ""} if k else {})})
            mine = [r for r in results if r.get("tool_call_id") == c.get("id")]
            out.extend(mine)
            results = [r for r in results if r not in mine]
        out.extend(results)  # results that name no call keep their place after the calls
        i = j
    return out


def fit_system_messages(messages: list[dict]) -> list[dict]:
    """``messages`` as templates that insist on one system message at the start take them:
    the system messages before the first other turn (an agent's instructions, then its
    developer message) merged into one, and each later one given as a user turn (merged
    with a user turn next to it), where it keeps its place in the conversation."""
    lead = 0
    while (
        lead < len(messages)
        and messages[lead].get("role") == "system"
        and isinstance(messages[lead].get("content"), str)
    ):
        lead += 1
    head = messages[:lead]
    if len(head) > 1:
        head = [{**head[0], "content": "\n\n".join(m["content"] for m in head if m["content"])}]
    out: list[dict] = list(head)
    for m in messages[lead:]:
        if m.get("role") == "system" and isinstance(m.get("content"), str):
            m = {"role": "user", "content": m["content"]}
        if (
            out
            and m.get("role") == "user" == out[-1].get("role")
            and isinstance(m.get("content"), str)
            and isinstance(out[-1].get("content"), str)
            and not out[-1].get("tool_calls")
        ):
            out[-1] = {**out[-1], "content": out[-1]["content"] + "\n\n" + m["content"]}
            continue
        out.append(m)
    return out
