"""How a model writes tool calls: each family's markers, a parser for replies, a writer
(for tests and the generic prompt) and the grammar that constrains calls.

The family is detected from the chat template's own text (:func:`detect`), never from the
model's name:

=================  =====================================================================
family             a call as the model writes it
=================  =====================================================================
``qwen-xml``       ``<tool_call>\\n<function=NAME>\\n<parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>``
                   (Qwen3.5/3.6, Qwen3-Coder, Nemotron 3, StepFun; Seed-OSS with ``<seed:tool_call>``)
``hermes``         ``<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>`` (Qwen2.5/3, QwQ, Hermes, Granite 4 …)
``llama3``         ``{"name": NAME, "parameters": {...}}``, optionally after ``<|python_tag|>``
``mistral``        ``[TOOL_CALLS][{"name": NAME, "arguments": {...}}]`` (Nemo)
``mistral-args``   ``[TOOL_CALLS]NAME[ARGS]{...}`` (Small 3.2, Ministral 3, Devstral)
``deepseek``       ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜><｜tool▁calls▁end｜>`` (V3.1)
``deepseek-r1``    the same with ``function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```\\n`` (R1 and its distills)
``generic``        ``{"tool_call": {"name": NAME, "arguments": {...}}}``: templates with no
                   call format of their own; the tools are described in a system message
=================  =====================================================================

XML parameters are typed through the tool's JSON schema: a string parameter is taken as
written, any other is JSON. A reply whose calls do not parse is content, never an error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from engine.runtime.prompt.tools import Tool, ToolCall

#: a grammar literal for marker text: special tokens as ``<[id]>``, text as a string
Lit = Callable[[str], str]

_WS = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def text_lit(text: str) -> str:
    """A Lark string literal for ``text`` (no special tokens)."""
    return json.dumps(text, ensure_ascii=False)


def _json_rule(schema: dict) -> str:
    """An inline JSON schema, generated compact like every JSON constraint here."""
    from engine.runtime.decode.grammar import JSON_OPTIONS

    schema = {**schema, "x-guidance": JSON_OPTIONS} if isinstance(schema, dict) else schema
    return "%json " + json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def _closed(schema: dict) -> dict:
    """A tool's arguments schema with no arguments beyond those it lists, unless it says
    otherwise: a call with made-up arguments is no use to the tool."""
    if isinstance(schema, dict) and schema.get("type", "object") == "object" and "additionalProperties" not in schema:
        return {**schema, "additionalProperties": False}
    return schema


def _call_object(tool: Tool, name_key: str, args_key: str) -> dict:
    return {"type": "object", "properties": {name_key: {"const": tool.name}, args_key: _closed(tool.parameters)},
            "required": [name_key, args_key], "additionalProperties": False}  # fmt: skip


def _args(value) -> dict | None:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _call(name, args) -> ToolCall | None:
    if not isinstance(name, str) or not name:
        return None
    a = _args(args)
    if a is None:
        return None
    return ToolCall(name, json.dumps(a, ensure_ascii=False))


class _Scan:
    """A cursor over reply text for the parsers."""

    def __init__(self, text: str, pos: int = 0):
        self.text, self.pos = text, pos

    def ws(self) -> None:
        self.pos = _WS.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def take(self, s: str) -> bool:
        if self.text.startswith(s, self.pos):
            self.pos += len(s)
            return True
        return False

    def until(self, s: str) -> str | None:
        i = self.text.find(s, self.pos)
        if i < 0:
            return None
        out = self.text[self.pos : i]
        self.pos = i + len(s)
        return out

    def json(self):
        try:
            value, end = _DECODER.raw_decode(self.text, self.pos)
        except ValueError:
            return _FAIL
        self.pos = end
        return value

    @property
    def done(self) -> bool:
        return self.pos >= len(self.text)


_FAIL = object()


def _name_then_json(text: str, opener: str, sep: str, closer: str, clean=lambda name: name) -> tuple[list[ToolCall], int]:
    """Calls written ``opener NAME sep {arguments} closer``, one after another."""
    s, calls, end = _Scan(text), [], 0
    while True:
        s.ws()
        if not s.take(opener):
            break
        name = s.until(sep)
        obj = s.json() if name is not None else _FAIL
        c = _call(clean(name).strip(), obj) if name is not None and obj is not _FAIL else None
        if c is None or not s.take(closer):
            break
        calls.append(c)
        end = s.pos
    return calls, end
DEEPSEEK_MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                    "<｜tool▁calls▁end｜>")  # fmt: skip


@dataclass(frozen=True)
class ToolFormat:
    """One family of call syntax."""

    name: str
    label: str
    #: text that opens the calls in a reply ("" : calls are the whole reply, JSON)
    trigger: str
    #: the marker that ends one call (streaming emits a call when it has seen it)
    call_end: str = ""

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker the format writes (shown as text even where a vocabulary holds it
        as a control token, so the parser sees it)."""
        return tuple(m for m in (self.trigger, self.call_end, "<|python_tag|>", "[ARGS]", "[CALL_ID]",
                                 *DEEPSEEK_MARKERS) if m)  # fmt: skip

    # ----------------------------------------------------------------- parse
    def find(self, text: str) -> int:
        """Where the calls start in ``text`` (-1: no call)."""
        if self.trigger:
            return text.find(self.trigger)
        stripped = text.lstrip()
        return len(text) - len(stripped) if stripped.startswith(("{", "<|python_tag|>")) else -1

    def parse(self, text: str, tools: tuple[Tool, ...] = ()) -> list[ToolCall] | None:
        """The calls ``text`` (starting at the trigger) holds, or None when it is not a
        complete, well-formed list of calls."""
        calls, end = self.scan(text, tools)
        if not calls or text[end:].strip():
            return None
        return calls

    def scan(self, text: str, tools: tuple[Tool, ...] = ()) -> tuple[list[ToolCall], int]:
        """The complete calls at the start of ``text`` and where the last one ends."""
        raise NotImplementedError

    # ----------------------------------------------------------------- write
    def write(self, calls: list[tuple[str, dict]]) -> str:
        raise NotImplementedError

    # --------------------------------------------------------------- grammar
    def body(self, tools: tuple[Tool, ...], parallel: bool, lit: Lit) -> str:
        """Lark rules defining ``call_body``: what follows the trigger (or the whole
        reply when there is none), one call or, with ``parallel``, several."""
        raise NotImplementedError


def _repeat(one: str, sep: str, parallel: bool) -> str:
    return f"call_body: {one}" + (f" ({sep} {one})*" if parallel else "") + "\n"


class QwenXml(ToolFormat):
    def __init__(self, open_tag: str = "<tool_call>", close_tag: str = "</tool_call>", label: str = "Qwen3.5/3.6 XML"):
        super().__init__("qwen-xml" if open_tag == "<tool_call>" else "seed-xml", label, open_tag, close_tag)

    def scan(self, text, tools=()):
        types = {t.name: t.parameters.get("properties", {}) for t in tools}
        s, calls, end = _Scan(text), [], 0
        while True:
            s.ws()
            if not s.take(self.trigger):
                break
            s.ws()
            if not s.take("<function="):
                break
            name = s.until(">")
            body = s.until("</function>") if name is not None else None
            if body is None:
                break
            s.ws()
            if not s.take(self.call_end):
                break
            args = {}
            for m in re.finditer(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", body, re.S):
                args[m.group(1).strip()] = _typed(m.group(2), types.get(name.strip(), {}).get(m.group(1).strip()))
            calls.append(ToolCall(name.strip(), json.dumps(args, ensure_ascii=False)))
            end = s.pos
        return calls, end

    def write(self, calls):
        out = []
        for name, args in calls:
            params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                             for k, v in args.items())  # fmt: skip
            out.append(f"{self.trigger}\n<function={name}>\n{params}</function>\n{self.call_end}")
        return "\n".join(out)

    def body(self, tools, parallel, lit):
        rules, fns = [], []
        for i, t in enumerate(tools):
            props = t.parameters.get("properties", {}) or {}
            required = set(t.parameters.get("required", []) or [])
            parts = []
            for j, (k, sch) in enumerate(props.items()):
                rule = f"p{i}_{j}"
                head = text_lit(f"<parameter={k}>\n")
                if _is_string(sch) and "enum" in sch:
                    values = " | ".join(text_lit(v) for v in sch["enum"])
                    rules.append(f"{rule}: {head} ({values}) {text_lit(chr(10) + '</parameter>' + chr(10))}")
                elif _is_string(sch):
                    most = sch.get("maxLength")
                    body = f"/(?s:.){{0,{int(most)}}}/" if isinstance(most, int) else "/(?s:.*)/"
                    rules.append(f"{rule}_v[lazy]: {body} {text_lit(chr(10) + '</parameter>')}")
                    rules.append(f"{rule}: {head} {rule}_v {text_lit(chr(10))}")
                else:
                    rules.append(f"{rule}: {head} {_json_rule(sch if isinstance(sch, dict) else {})} "
                                 f"{text_lit(chr(10) + '</parameter>' + chr(10))}")  # fmt: skip
                parts.append(rule if k in required else f"{rule}?")
            rules.append(f"f{i}: {text_lit(f'<function={t.name}>' + chr(10))} {' '.join(parts)} "
                         f"{text_lit('</function>' + chr(10))}")  # fmt: skip
            fns.append(f"f{i}")
        one = f'"\\n" ({" | ".join(fns)}) {lit(self.call_end)}'
        rules.append(f"one_call: {one}")
        return _repeat("one_call", f"WS {lit(self.trigger)}", parallel) + "\n".join(rules) + "\n"


def _is_string(schema) -> bool:
    if not isinstance(schema, dict):
        return False
    t = schema.get("type")
    return t == "string" or (isinstance(t, list) and t == ["string"]) or ("enum" in schema and all(
        isinstance(v, str) for v in schema["enum"]) and "type" not in schema)  # fmt: skip


def _typed(raw: str, schema) -> object:
    if _is_string(schema):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


class Hermes(ToolFormat):
    def __init__(self):
        super().__init__("hermes", "Hermes JSON in <tool_call>", "<tool_call>", "</tool_call>")

    def scan(self, text, tools=()):
        s, calls, end = _Scan(text), [], 0
        while True:
            s.ws()
            if not s.take("<tool_call>"):
                break
            s.ws()
            obj = s.json()
            s.ws()
            if obj is _FAIL or not isinstance(obj, dict) or not s.take("</tool_call>"):
                break
            c = _call(obj.get("name"), obj.get("arguments", obj.get("parameters", {})))
            if c is None:
                break
            calls.append(c)
            end = s.pos
        return calls, end

    def write(self, calls):
        return "\n".join(f'<tool_call>\n{json.dumps({"name": n, "arguments": a})}\n</tool_call>' for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(_json_rule(_call_object(t, "name", "arguments")) for t in tools)
        one = f'"\\n" ({alts}) "\\n" {lit("</tool_call>")}'
        return f"one_call: {one}\n" + _repeat("one_call", f"WS {lit('<tool_call>')}", parallel)


class Llama3(ToolFormat):
    def __init__(self):
        super().__init__("llama3", "Llama 3.x JSON", "", "}")

    def scan(self, text, tools=()):
        s, calls, end = _Scan(text), [], 0
        s.ws()
        s.take("<|python_tag|>")
        while True:
            s.ws()
            obj = s.json()
            if obj is _FAIL or not isinstance(obj, dict):
                break
            c = _call(obj.get("name"), obj.get("parameters", obj.get("arguments", {})))
            if c is None:
                break
            calls.append(c)
            end = s.pos
            s.ws()
            s.take(";")
        return calls, end

    def write(self, calls):
        return "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(_json_rule(_call_object(t, "name", "parameters")) for t in tools)
        return f"one_call: {alts}\n" + _repeat("one_call", '"; "', parallel)


class Mistral(ToolFormat):
    def __init__(self):
        super().__init__("mistral", "Mistral [TOOL_CALLS] JSON list", "[TOOL_CALLS]", "]")

    def scan(self, text, tools=()):
        s = _Scan(text)
        s.ws()
        if not s.take("[TOOL_CALLS]"):
            return [], 0
        s.ws()
        arr = s.json()
        if arr is _FAIL or not isinstance(arr, list):
            return [], 0
        calls = [_call(o.get("name"), o.get("arguments", {})) if isinstance(o, dict) else None for o in arr]
        if not calls or any(c is None for c in calls):
            return [], 0
        return calls, s.pos  # type: ignore[return-value]

    def write(self, calls):
        return "[TOOL_CALLS]" + json.dumps([{"name": n, "arguments": a, "id": f"{i:09d}"} for i, (n, a) in enumerate(calls)])

    def body(self, tools, parallel, lit):
        items = {"anyOf": [_call_object(t, "name", "arguments") for t in tools]}
        arr = {"type": "array", "items": items, "minItems": 1}
        if not parallel:
            arr["maxItems"] = 1
        return f"call_body: {_json_rule(arr)}\n"


class MistralArgs(ToolFormat):
    def __init__(self):
        super().__init__("mistral-args", "Mistral [TOOL_CALLS]name[ARGS]", "[TOOL_CALLS]", "}")

    def scan(self, text, tools=()):
        # Small 3.2 writes an id between the name and the arguments
        return _name_then_json(text, "[TOOL_CALLS]", "[ARGS]", "", lambda name: name.split("[CALL_ID]")[0])

    def write(self, calls):
        return "".join(f"[TOOL_CALLS]{n}[ARGS]{json.dumps(a)}" for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(f"{text_lit(t.name)} {lit('[ARGS]')} {_json_rule(_closed(t.parameters))}" for t in tools)
        return f"one_call: {alts}\n" + _repeat("one_call", lit("[TOOL_CALLS]"), parallel)


class DeepSeek(ToolFormat):
    BEGIN, CALL, SEP, CALL_END, END = DEEPSEEK_MARKERS

    def __init__(self, r1: bool = False):
        super().__init__("deepseek-r1" if r1 else "deepseek", "DeepSeek R1" if r1 else "DeepSeek V3.1", self.BEGIN,
                         self.CALL_END)  # fmt: skip

    @property
    def r1(self) -> bool:
        return self.name == "deepseek-r1"

    def scan(self, text, tools=()):
        s, calls, end = _Scan(text), [], 0
        s.ws()
        if not s.take(self.BEGIN):
            return [], 0
        while True:
            s.ws()
            if not s.take(self.CALL):
                break
            head = s.until(self.SEP)
            name = s.until("\n```json\n") if self.r1 else head
            if head is None or name is None:
                break
            obj = s.json()
            if self.r1 and obj is not _FAIL:
                s.ws()
                s.take("```")
            s.ws()
            c = _call(name.strip(), obj) if obj is not _FAIL else None
            if c is None or not s.take(self.CALL_END):
                break
            calls.append(c)
            end = s.pos
        s.pos = end
        s.ws()
        if calls and s.take(self.END):
            end = s.pos
        return calls, end

    def write(self, calls):
        parts = []
        for n, a in calls:
            if self.r1:
                parts.append(f"{self.CALL}function{self.SEP}{n}\n```json\n{json.dumps(a)}\n```{self.CALL_END}")
            else:
                parts.append(f"{self.CALL}{n}{self.SEP}{json.dumps(a)}{self.CALL_END}")
        return self.BEGIN + ("\n" if self.r1 else "").join(parts) + self.END

    def body(self, tools, parallel, lit):
        alts = []
        for t in tools:
            if self.r1:
                alts.append(f'"function" {lit(self.SEP)} {text_lit(t.name + chr(10) + "```json" + chr(10))} '
                            f'{_json_rule(_closed(t.parameters))} {text_lit(chr(10) + "```")}')  # fmt: skip
            else:
                alts.append(f"{text_lit(t.name)} {lit(self.SEP)} {_json_rule(_closed(t.parameters))}")
        one = f"{lit(self.CALL)} ({' | '.join(alts)}) {lit(self.CALL_END)}"
        sep = '"\\n"' if self.r1 else ""
        return f"one_call: {one}\n" + f"call_body: one_call{f' ({sep} one_call)*' if parallel else ''} {lit(self.END)}\n"


class Generic(ToolFormat):
    def __init__(self):
        super().__init__("generic", "generic JSON (tools described in a system message)", "", "}")

    def scan(self, text, tools=()):
        s = _Scan(text)
        s.ws()
        obj = s.json()
        if obj is _FAIL or not isinstance(obj, dict):
            return [], 0
        raw = obj.get("tool_calls") if "tool_calls" in obj else [obj.get("tool_call")]
        if not isinstance(raw, list) or not raw:
            return [], 0
        calls = [_call(c.get("name"), c.get("arguments", {})) if isinstance(c, dict) else None for c in raw]
        if any(c is None for c in calls):
            return [], 0
        return calls, s.pos  # type: ignore[return-value]

    def write(self, calls):
        if len(calls) == 1:
            return json.dumps({"tool_call": {"name": calls[0][0], "arguments": calls[0][1]}})
        return json.dumps({"tool_calls": [{"name": n, "arguments": a} for n, a in calls]})

    def body(self, tools, parallel, lit):
        one = {"anyOf": [_call_object(t, "name", "arguments") for t in tools]}
        schema = {"type": "object", "properties": {"tool_call": one}, "required": ["tool_call"], "additionalProperties": False}
        if parallel:
            many = {"type": "object", "properties": {"tool_calls": {"type": "array", "items": one, "minItems": 1}},
                    "required": ["tool_calls"], "additionalProperties": False}  # fmt: skip
            schema = {"anyOf": [schema, many]}
        return f"call_body: {_json_rule(schema)}\n"

    @staticmethod
    def system_prompt(tools: tuple[Tool, ...]) -> str:
        """How the generic format tells a model about the tools (llama-server's way)."""
        listing = "\n".join(json.dumps(t.to_template()["function"], ensure_ascii=False) for t in tools)
        return ("You can call these tools:\n" + listing + "\n\nTo call a tool, reply with only a JSON object: "
                '{"tool_call": {"name": <tool name>, "arguments": {<arguments>}}}. Otherwise answer normally.')  # fmt: skip


class FunctionTag(ToolFormat):
    """``<function=NAME>{...}</function>`` (Functionary v3.1)."""

    def __init__(self):
        super().__init__("function-tag", "Functionary <function=name>{json}</function>", "<function=", "</function>")

    def scan(self, text, tools=()):
        return _name_then_json(text, "<function=", ">", "</function>")

    def write(self, calls):
        return "".join(f"<function={n}>{json.dumps(a)}</function>" for n, a in calls)

    def body(self, tools, parallel, lit):
        alts = " | ".join(f"{text_lit(t.name + '>')} {_json_rule(_closed(t.parameters))}" for t in tools)
        return f'one_call: ({alts}) "</function>"\n' + _repeat("one_call", '"<function="', parallel)


QWEN_XML = QwenXml()
SEED_XML = QwenXml("<seed:tool_call>", "</seed:tool_call>", "Seed-OSS XML")
HERMES = Hermes()
LLAMA3 = Llama3()
MISTRAL = Mistral()
MISTRAL_ARGS = MistralArgs()
DEEPSEEK = DeepSeek()
DEEPSEEK_R1 = DeepSeek(r1=True)
GENERIC = Generic()
FUNCTION_TAG = FunctionTag()
FORMATS = (QWEN_XML, SEED_XML, HERMES, LLAMA3, MISTRAL, MISTRAL_ARGS, DEEPSEEK, DEEPSEEK_R1, FUNCTION_TAG, GENERIC)


@dataclass(frozen=True)
class Detected:
    format: ToolFormat
    #: the template describes ``tools`` itself (else a system message describes them)
    describes_tools: bool

    @property
    def knows_calls(self) -> bool:
        """The template writes earlier calls and tool results in its own format."""
        return self.format is not GENERIC or self.describes_tools


def renders_tools(template: str | None) -> bool:
    return bool(template) and re.search(r"\btools\b", template) is not None  # type: ignore[arg-type]


def detect(template: str | None) -> Detected:
    """The call format a chat template teaches, from its own markers."""
    t = template or ""
    described = renders_tools(t)
    if "<function=" in t:
        if "<parameter=" in t:
            return Detected(SEED_XML if "<seed:tool_call>" in t else QWEN_XML, described)
        return Detected(FUNCTION_TAG, described)
    if DeepSeek.BEGIN in t:
        return Detected(DEEPSEEK_R1 if "```json" in t else DEEPSEEK, described)
    if "[TOOL_CALLS]" in t:
        return Detected(MISTRAL_ARGS if "[ARGS]" in t else MISTRAL, described)
    if "<tool_call>" in t and "arguments" in t and not any(m in t for m in ("<arg_key>", "<invoke", "<tool_calls>")):
        return Detected(HERMES, described)
    if "<|python_tag|>" in t or ("<|start_header_id|>" in t and '"parameters"' in t):
        return Detected(LLAMA3, described)
    return Detected(GENERIC, described)
