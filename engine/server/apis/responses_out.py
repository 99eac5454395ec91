"""A Responses API reply (``POST /v1/responses``) as OpenAI's output items — a ``reasoning``
item, a ``message`` with one ``output_text`` part, a ``function_call`` per call — whole
(:func:`response_object`) or streamed as OpenAI's event sequence (:class:`EventWriter`); the
request side is :mod:`engine.server.apis.responses`."""

from __future__ import annotations

import json
import time
from typing import Any

from engine.runtime import jobs as J
from engine.server.generation import timings
from engine.server.replyblocks import DELTA, START, STOP, TEXT, THINKING, TOOL, Block, BlockEvent
from engine.server.apis.responses import ResponsesRequest, input_messages
from engine.server.schemas import new_id


# ----------------------------------------------------------------- output
def status_of(res: J.GenerateResult) -> tuple[str, dict | None]:
    if res.ending is J.Ending.CUT:
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


def usage(res: J.GenerateResult) -> dict:
    out = len(res.tokens)
    return {
        "input_tokens": res.prompt_tokens,
        "input_tokens_details": {"cached_tokens": res.stats.prompt_tokens_reused},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": res.stats.thinking_tokens},
        "total_tokens": res.prompt_tokens + out,
    }


class Items:
    """Output item ids and shapes for one response's blocks."""

    def __init__(self):
        self._ids: dict[int, str] = {}

    def id(self, b: Block) -> str:
        if b.index not in self._ids:
            prefix = {THINKING: "rs", TEXT: "msg", TOOL: "fc"}[b.kind]
            self._ids[b.index] = new_id(prefix)
        return self._ids[b.index]

    def item(self, b: Block, done: bool) -> dict:
        status = "completed" if done else "in_progress"
        if b.kind == THINKING:
            content = [{"type": "reasoning_text", "text": b.text}] if done else []
            return {"type": "reasoning", "id": self.id(b), "summary": [], "content": content, "status": status}
        if b.kind == TEXT:
            content = [_text_part(b.text)] if done else []
            return {"type": "message", "id": self.id(b), "role": "assistant", "status": status, "content": content}
        assert b.call is not None
        return {
            "type": "function_call",
            "id": self.id(b),
            "call_id": b.call.id,
            "name": b.call.name,
            "arguments": b.text if done else "",
            "status": status,
        }


def _text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def response_object(
    rid: str,
    created: int,
    req: ResponsesRequest,
    status: str,
    output: list[dict],
    res: J.GenerateResult | None = None,
    incomplete: dict | None = None,
    error: dict | None = None,
) -> dict:
    out = {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": error,
        "incomplete_details": incomplete,
        "model": req.model,
        "output": output,
        "previous_response_id": req.previous_response_id,
        "store": req.store,
        "usage": usage(res) if res is not None else None,
        **req.echo,
    }
    if res is not None:
        out["timings"] = timings(res)
    return out


def history_of(output: list[dict]) -> list[dict]:
    """A response's output items as the chat messages a later turn continues from."""
    return input_messages([i for i in output if i.get("type") in ("message", "function_call", "reasoning")])


class EventWriter:
    """OpenAI's streamed Responses events for one response, numbered in order."""

    def __init__(self, rid: str, created: int, req: ResponsesRequest):
        self.rid, self.created, self.req = rid, created, req
        self.seq = 0
        self.items = Items()
        self.output: list[dict] = []

    def event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()

    def opening(self) -> list[bytes]:
        snap = response_object(self.rid, self.created, self.req, "in_progress", [])
        return [self.event("response.created", response=snap), self.event("response.in_progress", response=snap)]

    def block(self, ev: BlockEvent) -> list[bytes]:
        b, out = ev.block, []
        ix = b.index
        iid = self.items.id(b)
        part_kind = "reasoning_text" if b.kind == THINKING else "output_text"
        if ev.what == START:
            out.append(self.event("response.output_item.added", output_index=ix, item=self.items.item(b, False)))
            if b.kind != TOOL:
                empty = {"type": "reasoning_text", "text": ""} if b.kind == THINKING else _text_part("")
                out.append(
                    self.event("response.content_part.added", item_id=iid, output_index=ix, content_index=0, part=empty)
                )
        elif ev.what == DELTA:
            if b.kind == TOOL:
                out.append(
                    self.event("response.function_call_arguments.delta", item_id=iid, output_index=ix, delta=ev.delta)
                )
            elif b.kind == THINKING:
                out.append(
                    self.event(
                        "response.reasoning_text.delta", item_id=iid, output_index=ix, content_index=0, delta=ev.delta
                    )
                )
            else:
                out.append(
                    self.event(
                        "response.output_text.delta",
                        item_id=iid,
                        output_index=ix,
                        content_index=0,
                        delta=ev.delta,
                        logprobs=[],
                    )
                )
        elif ev.what == STOP:
            if b.kind == TOOL:
                out.append(
                    self.event(
                        "response.function_call_arguments.done",
                        item_id=iid,
                        output_index=ix,
                        arguments=b.text,
                        name=b.call.name if b.call else None,
                    )
                )
            else:
                done_kind = "response.reasoning_text.done" if b.kind == THINKING else "response.output_text.done"
                extra = {} if b.kind == THINKING else {"logprobs": []}
                out.append(self.event(done_kind, item_id=iid, output_index=ix, content_index=0, text=b.text, **extra))
                part = {"type": part_kind, "text": b.text} if b.kind == THINKING else _text_part(b.text)
                out.append(
                    self.event("response.content_part.done", item_id=iid, output_index=ix, content_index=0, part=part)
                )
            item = self.items.item(b, True)
            self.output.append(item)
            out.append(self.event("response.output_item.done", output_index=ix, item=item))
        return out

    def closing(self, res: J.GenerateResult) -> tuple[bytes, dict]:
        status, incomplete = status_of(res)
        obj = response_object(self.rid, self.created, self.req, status, self.output, res, incomplete)
        return self.event("response.completed" if status == "completed" else "response.incomplete", response=obj), obj

    def failed(self, code: str | None, message: str) -> bytes:
        err = {"code": code or "server_error", "message": message}
        obj = response_object(self.rid, self.created, self.req, "failed", self.output, error=err)
        return self.event("response.failed", response=obj)


def now() -> int:
    return int(time.time())


def output_of(res: J.GenerateResult) -> list[dict]:
    """A finished reply as output items (what a stream's items add up to)."""
    items = Items()
    reply = res.reply
    blocks: list[Block] = []
    if reply is None:
        blocks.append(Block(TEXT, 0, text=res.text))
    else:
        if reply.reasoning:
            blocks.append(Block(THINKING, len(blocks), text=reply.reasoning))
        if reply.content or not reply.calls:
            blocks.append(Block(TEXT, len(blocks), text=reply.content))
        for c in reply.calls:
            blocks.append(Block(TOOL, len(blocks), call=c, text=c.arguments))
    return [items.item(b, True) for b in blocks]
