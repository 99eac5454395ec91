"""The training corpus: text that is on every machine with Python, with its licence.

* **Source code**: the Python standard library of the interpreter running the pipeline
  (its ``.py`` files, minus tests, IDLE, 2to3 and generated tables). Licence: PSF-2.0.
* **Docstring answers**: chat turns built with :mod:`ast` from the same files: "What does
  ``json.dumps`` do?" answered by the first paragraph of its docstring; "Write the
  signature of ..." answered by its ``def`` line. Licence: PSF-2.0 (derived text).
* **House chat**: a few dozen hand-written turns about the demo itself (greetings, what
  it is, how MTP works), written for this project. Licence: MIT (this repository).

Each document is assigned to the held-out split by a hash of its name (2%), so the split
never depends on file order. The corpus is determined by the interpreter's version: the
manifest records it (``python_version``) and the file list's digest.
"""

from __future__ import annotations

import ast
import hashlib
import platform
import sysconfig
from dataclasses import dataclass
from pathlib import Path

SKIP_PARTS = frozenset(
    {
        "test",
        "tests",
        "idlelib",
        "lib2to3",
        "site-packages",
        "dist-packages",
        "__pycache__",
        "ensurepip",
        "turtledemo",
        "pydoc_data",
        "lib-dynload",
    }
)
SKIP_PREFIXES = ("config-",)
HELD_OUT_PER_MILLE = 20
LICENCES = {
    "stdlib-source": "PSF-2.0 (Python Software Foundation License), the interpreter's own standard library",
    "stdlib-docstrings": "PSF-2.0, questions and answers derived from standard-library docstrings",
    "house-chat": "MIT, written for MTP Studio",
}

IM_START, IM_END, EOT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"


@dataclass(frozen=True)
class Document:
    name: str
    source: str  # a LICENCES key
    text: str

    @property
    def held_out(self) -> bool:
        digest = hashlib.sha256(self.name.encode()).digest()
        return int.from_bytes(digest[:4], "big") % 1000 < HELD_OUT_PER_MILLE


def chat(*turns: tuple[str, str]) -> str:
    return "".join(f"{IM_START}{role}\n{content}{IM_END}\n" for role, content in turns)


HOUSE_CHAT: tuple[tuple[str, str], ...] = (
    (
        "hello",
        "Hello! I am MTP Studio's demo model, a tiny network trained on Python's standard library. Ask me about "
        "Python, or give me code to complete.",
    ),
    ("hi", "Hi! I am a small demo model. I know a little about Python and its standard library."),
    ("Hello!", "Hello! How can I help you with Python today?"),
    (
        "Who are you?",
        "I am the demo model that ships with MTP Studio: about four million parameters, trained on one CPU "
        "thread from the Python standard library's source and docstrings.",
    ),
    (
        "What can you do?",
        "I can complete Python code and answer short questions about standard-library functions. I am far too "
        "small to be reliable, but I show how speculative decoding speeds up a real model.",
    ),
    (
        "What is MTP?",
        "MTP is multi-token prediction. A small head predicts the token after next; the model checks those "
        "drafts in one batch, keeps the ones it agrees with and discards the rest, so the output is the same, "
        "only faster.",
    ),
    (
        "What is speculative decoding?",
        "Speculative decoding drafts a few tokens cheaply and verifies them with the full model in one batch. "
        "Accepted drafts save forward passes; rejected ones are rolled back, so the text does not change.",
    ),
    (
        "How do I load a bigger model?",
        "Open the Models page, search Hugging Face for a GGUF model with an MTP head, download it, and load it. "
        "The Chat page then uses it.",
    ),
    ("Thanks!", "You are welcome!"),
    ("thank you", "You are welcome. Happy coding!"),
    (
        "How do I read a file in Python?",
        'Use open() in a with statement:\n\nwith open(path, encoding="utf-8") as f:\n    text = f.read()',
    ),
    (
        "How do I reverse a list?",
        "Call list.reverse() to reverse it in place, or use reversed(items) or items[::-1] for a new sequence.",
    ),
    (
        "How do I sort a dictionary by value?",
        "Use sorted(d.items(), key=lambda item: item[1]), which returns a list of (key, value) pairs ordered by value.",
    ),
    (
        "Write a function that adds two numbers.",
        'def add(a, b):\n    """Return the sum of a and b."""\n    return a + b',
    ),
    (
        "Write a function that checks if a number is even.",
        'def is_even(n):\n    """Return True if n is even."""\n    return n % 2 == 0',
    ),
    (
        "How do I get the current time?",
        "Use the datetime module: datetime.datetime.now() returns the current local date and time.",
    ),
    (
        "How do I parse JSON?",
        "Use json.loads(text) for a string, or json.load(f) for an open file. Both return Python objects.",
    ),
    (
        "What is a list comprehension?",
        "A compact way to build a list: [x * x for x in range(10)] makes the squares of 0 to 9.",
    ),
)


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path | None = None) -> list[Path]:
    root = root or stdlib_dir()
    out = []
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root).parts
        if SKIP_PARTS & set(parts) or parts[0].startswith(SKIP_PREFIXES):
            continue
        out.append(f)
    return out


def _module_name(root: Path, f: Path) -> str:
    rel = f.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _first_paragraph(doc: str) -> str:
    para = doc.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines()).strip()


def docstring_turns(module: str, text: str) -> list[tuple[str, str]]:
    """(question, answer) pairs from a module's public functions and classes."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    pairs: list[tuple[str, str]] = []
    doc = ast.get_docstring(tree)
    if doc and not module.startswith("_"):
        pairs.append((f"What is the {module} module for?", _first_paragraph(doc)))
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc or len(doc) < 20:
            continue
        kind = "class" if isinstance(node, ast.ClassDef) else "function"
        pairs.append((f"What does the {kind} {module}.{node.name} do?", _first_paragraph(doc)))
        if isinstance(node, ast.FunctionDef):
            line = text.splitlines()[node.lineno - 1].strip()
            if line.startswith("def ") and line.endswith(":"):
                pairs.append(
                    (f"What is the signature of {module}.{node.name}?", f'{line}\n    """{_first_paragraph(doc)}"""')
                )
    return pairs


def documents(root: Path | None = None) -> list[Document]:
    root = root or stdlib_dir()
    docs: list[Document] = []
    for f in stdlib_files(root):
        text = f.read_text(encoding="utf-8", errors="replace")
        module = _module_name(root, f)
        docs.append(Document(f"src:{module}", "stdlib-source", text))
        for i, (q, a) in enumerate(docstring_turns(module, text)):
            docs.append(Document(f"qa:{module}:{i}", "stdlib-docstrings", chat(("user", q), ("assistant", a))))
    for i, (q, a) in enumerate(HOUSE_CHAT):
        docs.append(Document(f"house:{i}", "house-chat", chat(("user", q), ("assistant", a))))
        docs.append(
            Document(
                f"house-sys:{i}",
                "house-chat",
                chat(("system", "You are a helpful assistant."), ("user", q), ("assistant", a)),
            )
        )
    return docs


def manifest(docs: list[Document]) -> dict:
    """What the corpus was made of: enough to tell whether two runs saw the same text."""
    digest = hashlib.sha256()
    counts: dict[str, dict[str, int]] = {}
    for d in docs:
        digest.update(d.name.encode() + b"\0" + hashlib.sha256(d.text.encode()).digest())
        c = counts.setdefault(d.source, {"documents": 0, "characters": 0})
        c["documents"] += 1
        c["characters"] += len(d.text)
    return {
        "python_version": platform.python_version(),
        "sha256": digest.hexdigest(),
        "sources": {k: {**v, "licence": LICENCES[k]} for k, v in sorted(counts.items())},
        "held_out_per_mille": HELD_OUT_PER_MILLE,
    }
