"""``mtp-studio generate``: one generation from the command line, through the engine."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine.cli import EXIT_INVALID, EXIT_USAGE, die
from engine.errors import InvalidRequestError, InvalidSettingError, MtpStudioError
from engine.runtime.decode.depth import AUTO, DraftDepth
from engine.settings import DEFAULT_CTX

if TYPE_CHECKING:
    from engine.runtime.modelinfo import ModelInfo


def depth_arg(value: str) -> DraftDepth:
    try:
        return DraftDepth.parse(value)
    except InvalidRequestError:
        raise argparse.ArgumentTypeError("must be an integer >= 1 or 'auto'") from None


def add_model_args(p: argparse.ArgumentParser, *, many: bool = False) -> None:
    """Options shared by every command that loads a model; ``many``: ``--model`` may be
    given several times or not at all (``serve``: the library, on demand)."""
    if many:
        p.add_argument(
            "--model",
            action="append",
            default=[],
            metavar="GGUF",
            help="serve this GGUF, loaded at start (repeatable); without --model every library model is "
            "served by name, loaded on demand",
        )
    else:
        p.add_argument("--model", required=True, help="target GGUF (shard 1 of a split set)")
    p.add_argument("--head", help="separate MTP head GGUF (mtp-*.gguf)" + (" for the first --model" if many else ""))
    p.add_argument(
        "--mtp",
        choices=["off", "integrated", "external", "auto"],
        default="auto",
        help="where MTP drafts come from (default: auto)",
    )
    p.add_argument(
        "--ctx",
        type=int,
        default=None,
        help=f"context length (default {DEFAULT_CTX}, lowered to what fits this machine's memory; "
        "a --ctx that does not fit is refused)",
    )
    p.add_argument(
        "--no-fit-check",
        action="store_true",
        help="load even when the memory estimate says it does not fit (llama.cpp may then fail)",
    )
    p.add_argument(
        "--mmproj",
        metavar="GGUF",
        default=None,
        help="the model's projector (mmproj-*.gguf): it then sees images (and hears audio, where the projector does)"
        + (" (for the first --model)" if many else ""),
    )
    p.add_argument("--gpu-layers", type=int, default=-1, help="layers to offload (-1: all, 0: CPU only)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: the CPUs available)")
    p.add_argument(
        "--exact",
        action="store_true",
        help="batch-invariant arithmetic: MTP output bit-identical to one-token-at-a-time decoding (slower; "
        "docs/mtp.md)",
    )
    p.add_argument(
        "--chat-template-file",
        metavar="FILE",
        default=None,
        help="a Jinja chat template to use instead of the model's own (as llama-server's option)",
    )
    add_rpc_args(p)


def add_rpc_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rpc",
        metavar="HOST:PORT,...",
        default=None,
        help="also use these machines' devices (each runs `mtp-studio rpc serve`); the model runs in a worker process",
    )
    p.add_argument(
        "--tensor-split",
        metavar="W,W,...",
        default=None,
        help="with --rpc: layer shares, one per device (remote ones first, then this machine); default: by free memory",
    )


def register(sub) -> None:
    p = sub.add_parser("generate", help="generate text from a prompt or a chat")
    add_model_args(p)
    p.add_argument(
        "--draft-depth", type=depth_arg, default=None, help="tokens drafted per round, or 'auto' (default auto)"
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="raw prompt text (no chat template)")
    src.add_argument("--chat-json", type=Path, help="JSON file with a list of {role, content} messages")
    p.add_argument(
        "--image",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a picture (PNG, JPEG, GIF, BMP) after the --prompt text, as one user turn in the chat template; "
        "needs --mmproj (repeatable)",
    )
    p.add_argument("--max-tokens", type=int, default=None, help="most tokens generated (default 1024)")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    p.add_argument("--temperature", type=float, default=None, help="0: greedy (default); > 0 samples, with MTP too")
    p.add_argument("--top-p", type=float, default=None, help="nucleus sampling (default 1: no cut)")
    p.add_argument("--top-k", type=int, default=None, help="0: no top-k limit (default)")
    p.add_argument("--seed", type=int, default=None, help="same seed, same text (-1: random)")
    p.add_argument(
        "--sampled-draft",
        action="store_true",
        help="while sampling, sample the drafts too (rejection sampling: higher acceptance, exact in distribution, "
        "but not the same text as plain sampling with the same seed)",
    )
    p.add_argument(
        "--suffix-drafts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draft from the conversation itself too: what followed the newest tokens where they "
        "occurred before, also without an MTP head (default: on; docs/agent-speed.md)",
    )
    p.add_argument(
        "--presence-penalty", type=float, default=None, help="OpenAI's: -2 to 2, per token already generated"
    )
    p.add_argument("--frequency-penalty", type=float, default=None, help="OpenAI's: -2 to 2, per time generated")
    p.add_argument("--repeat-penalty", type=float, default=None, help="llama.cpp's: above 0 (1: off)")
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--json-schema",
        type=Path,
        metavar="FILE",
        help="the output follows this JSON schema (docs/endpoint.md: Structured output)",
    )
    g.add_argument("--grammar", type=Path, metavar="FILE", help="the output follows this GBNF or Lark grammar")
    g.add_argument("--regex", metavar="RE", help="the output matches this regular expression")
    p.add_argument("--json", action="store_true", help="print one JSON object with tokens, text and stats")
    p.set_defaults(func=run)


def context_line(info: ModelInfo) -> str:
    """What context a load chose and why, in one line."""
    n, asked, fits, label = info.n_ctx, info.n_ctx_requested or info.n_ctx, info.max_ctx_fits, info.fit_label
    if fits is None:
        return f"context {n} (memory not checked)"
    trained = info.n_ctx_train
    if n < asked and trained and n >= trained:
        return f"context {n}: lowered from {asked}, the model's training context ({label})"
    if n < asked and fits < asked:
        return f"context {n}: lowered from {asked}, the largest that fits memory ({label})"
    if n < asked:
        return f"context {n}: the model's training context ({label})"
    return f"context {n} ({label}; up to {fits} fits)"


def load_spec(args, max_draft_depth: int = 4):
    from engine.runtime.load.loader import LoadSpec, MtpSource

    exact = bool(getattr(args, "exact", False))
    if exact:  # before llama.cpp is loaded: ggml reads its switches once
        from engine.runtime.llama import exact as exact_mod

        exact_mod.request()

    depth = getattr(args, "draft_depth", None)  # None: the engine's, auto
    max_draft_depth = (AUTO if depth is None else DraftDepth.parse(depth)).load_depth(max_draft_depth)
    rpc, split = rpc_options(args)
    template = None
    if getattr(args, "chat_template_file", None):
        try:
            template = Path(args.chat_template_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SystemExit(f"--chat-template-file: cannot read {args.chat_template_file}: {e}") from None
    return LoadSpec(
        args.model,
        head=args.head,
        mtp=MtpSource(args.mtp),
        n_ctx=args.ctx or DEFAULT_CTX,
        # an explicit --ctx is kept or refused; the default is lowered to what fits
        fit="off" if args.no_fit_check else ("check" if args.ctx else "shrink"),
        n_gpu_layers=args.gpu_layers,
        n_threads=args.threads,
        max_draft_depth=max_draft_depth,
        exact=exact,
        rpc=rpc,
        tensor_split=split,
        chat_template=template,
        parallel=getattr(args, "parallel", 1),
        mmproj=getattr(args, "mmproj", None),
    )


def grammar_arg(args):
    """``--json-schema FILE``, ``--grammar FILE`` or ``--regex RE`` as a checked constraint."""
    from engine.runtime.decode.grammar import GrammarSpec, compile_grammar

    spec = None
    if getattr(args, "json_schema", None) is not None:
        try:
            schema = json.loads(args.json_schema.read_text(encoding="utf-8"))
        except OSError as e:
            raise InvalidSettingError(f"cannot read {args.json_schema}: {e.strerror}") from None
        except ValueError as e:
            raise InvalidSettingError(f"{args.json_schema} is not valid JSON: {e}") from None
        spec = GrammarSpec.json_schema(schema, param="--json-schema")
    elif getattr(args, "grammar", None) is not None:
        try:
            spec = GrammarSpec("gbnf", args.grammar.read_text(encoding="utf-8"), "--grammar")
        except OSError as e:
            raise InvalidSettingError(f"cannot read {args.grammar}: {e.strerror}") from None
    elif getattr(args, "regex", None) is not None:
        spec = GrammarSpec("regex", args.regex, "--regex")
    if spec is not None:
        compile_grammar(spec)  # refused now, with words, before the model loads
    return spec


def rpc_options(args) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
    """``--rpc`` and ``--tensor-split``, validated. Raises :class:`InvalidSettingError`."""
    from engine.rpc.endpoints import parse_endpoints, parse_tensor_split

    eps = parse_endpoints(getattr(args, "rpc", None))
    return tuple(str(e) for e in eps), parse_tensor_split(getattr(args, "tensor_split", None))


def run(args) -> int:
    from engine.runtime import jobs as J
    from engine.runtime.engine import Engine, EngineConfig
    from engine.runtime.decider import INTERACTIVE

    messages = None
    if args.chat_json is not None:
        try:
            messages = json.loads(args.chat_json.read_text(encoding="utf-8"))
        except OSError as e:
            return die(f"cannot read {args.chat_json}: {e.strerror}", EXIT_USAGE)
        except ValueError as e:
            return die(f"{args.chat_json} is not valid JSON: {e}", EXIT_USAGE)
    try:
        grammar = grammar_arg(args)
        spec = load_spec(args)
        if args.image:
            if args.prompt is None:
                return die("--image goes with --prompt (the text asked about the picture)", EXIT_USAGE)
            messages = [{"role": "user", "content": [{"type": "text", "text": args.prompt}, *image_parts(args.image)]}]
            args.prompt = None
    except MtpStudioError as e:
        return die(str(e), EXIT_USAGE)
    # what the app and `serve` give a request: the options above only say what the user set
    with Engine(EngineConfig(request=INTERACTIVE)) as engine:
        try:
            info = engine.submit(J.LoadModel(spec)).result()
            if not args.json:
                print(f"mtp-studio: {context_line(info)}", file=sys.stderr)
                for note in info.fallbacks:
                    print(f"mtp-studio: note: {note}", file=sys.stderr)
                if info.placement:
                    print(f"mtp-studio: layers: {placement_line(info.placement)}", file=sys.stderr)
            job = J.Generate(
                prompt=args.prompt,
                messages=messages,
                max_tokens=args.max_tokens,
                stop=tuple(args.stop),
                temperature=args.temperature,
                top_p=args.top_p,
                top_k=args.top_k,
                seed=args.seed,
                draft_depth=args.draft_depth,
                sampled_draft=args.sampled_draft or None,
                suffix_drafts=args.suffix_drafts,
                grammar=grammar,
                presence_penalty=args.presence_penalty,
                frequency_penalty=args.frequency_penalty,
                repeat_penalty=args.repeat_penalty,
            )
            if args.json:
                result = engine.submit(job).result()
                out = result.to_json()
                keys = (
                    "architecture",
                    "quantization",
                    "mtp",
                    "chat_template",
                    "add_bos",
                    "fallbacks",
                    "extra_bufts",
                    "exact",
                    "identity",
                    "rpc",
                    "placement",
                )
                out["model"] = {k: v for k, v in info.to_json().items() if k in keys}
                sys.stdout.write(json.dumps(out) + "\n")
                return 0
            handle = engine.submit(job)
            for ev in handle.events():
                if isinstance(ev, J.Tokens):
                    sys.stdout.write(ev.text)
                    sys.stdout.flush()
            result = handle.result()
            s = result.stats
            sys.stdout.write("\n")
            print(
                f"[{s.generated} tokens, {s.tokens_per_second:.1f} tok/s, mtp {s.mtp}, depth {s.depth_json}, "
                f"acceptance {s.acceptance:.2f}, mean accepted {s.mean_accept_len:.2f}, "
                f"target forwards {s.target_forwards}]",
                file=sys.stderr,
            )
            return 0
        except MtpStudioError as e:
            return die(str(e), EXIT_INVALID)


def image_parts(paths: list[Path]) -> list[dict]:
    """``--image`` files as checked media parts. Raises InvalidRequestError in words."""
    from engine.runtime.media import part
    from engine.runtime.media.intake import from_bytes

    parts = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise InvalidSettingError(f"--image: cannot read {path}: {e.strerror}") from None
        parts.append(part(from_bytes(data, f"--image {path}")))
    return parts


def placement_line(p: dict) -> str:
    """One line: which device holds how many layers (:attr:`ModelInfo.placement`)."""
    from engine.runtime.load.placement import placed_devices

    devices, local = placed_devices({"placement": p})
    parts = [f"{d.name} ({d.endpoint or 'this machine'}) {d.layers}" for d in devices]
    return ", ".join(parts) + f"; MTP head and output on {local}"
