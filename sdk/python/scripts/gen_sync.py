"""Generate the sync client from the async one: src/lizard/_sync.py from _async.py, _commands.py from
_async_commands.py (MODULES).

    python sdk/python/scripts/gen_sync.py           # rewrite _sync.py and _commands.py
    python sdk/python/scripts/gen_sync.py --check   # exit 1 if they are not what their sources generate

A feature of the client is written once, in the async module; tests/test_generated.py fails when the sync
one was not regenerated. The rewrite works on Python's tokens, not on text, in two passes:

1. Seams. Where the clients differ in more than ``await`` (a thread or a task, a property that may fetch),
   _async.py says both, in blocks that are plain Python for the async module:

       if True:  # ASYNC
           ...the async code...
       else:  # SYNC
           ...the sync code...

   (the ``else`` is optional), and ``if False:  # SYNC`` for code the sync client alone has. The sync module
   gets the ``# SYNC`` branch, dedented. A docstring followed by a line ``# SYNC docstring:`` and a second
   string gives the sync client the second one.
2. Tokens. ``async`` and ``await`` go; the names in RENAMES are replaced, and inside strings too (forward
   references, reprs, docstrings).
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from pathlib import Path
from typing import List

SRC = Path(__file__).resolve().parent.parent / "src" / "lizard"

# Each async module (the source) and the sync module generated from it.
MODULES = {"_async.py": "_sync.py", "_async_commands.py": "_commands.py"}

HEADER = (
    "# Generated from {source} by scripts/gen_sync.py: do not edit; edit {source} and run\n"
    "#     python sdk/python/scripts/gen_sync.py\n"
)

# Each async name and the sync name it becomes.
RENAMES = {
    # The client's own classes and helpers.
    "AsyncCodeSandbox": "CodeSandbox", "AsyncFiles": "Files", "AsyncProcess": "Process",
    "AsyncNetwork": "Network", "AsyncVolume": "Volume", "AsyncSecret": "Secret", "AsyncTemplate": "Template",
    "AsyncWatchHandle": "WatchHandle", "AsyncEvents": "Events", "AsyncEventStream": "EventStream",
    "AsyncDesktop": "Desktop", "AsyncDesktopStream": "DesktopStream", "AsyncFileData": "FileData",
    "_AsyncHttp": "_Http", "_PendingSandbox": "CodeSandbox",
    "_async_commands": "_commands", "AsyncCommands": "Commands", "AsyncPty": "Pty",
    "AsyncCommandHandle": "CommandHandle", "AsyncPtyHandle": "PtyHandle",
    # The helpers of _core.py that have an async twin.
    "ainject_trace": "inject_trace", "aupload_body": "upload_body", "acallback": "callback",
    # httpx, typing and the protocols of iteration and context managers.
    "AsyncClient": "Client", "AsyncBaseTransport": "BaseTransport",
    "aiter_bytes": "iter_bytes", "aread": "read", "aclose": "close", "AsyncIterator": "Iterator",
    "__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__", "__anext__": "__next__",
}

_WORD = re.compile(r"\b(" + "|".join(map(re.escape, sorted(RENAMES, key=len, reverse=True))) + r")\b")
_STRINGS = {tokenize.STRING} | {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block(lines: List[str], start: int, indent: int) -> int:
    """The end of the block that starts at lines[start] and is indented deeper than indent."""
    end = start
    for i in range(start, len(lines)):
        if lines[i].strip():
            if _indent(lines[i]) <= indent:
                break
            end = i + 1
    return end


def _dedent(lines: List[str]) -> List[str]:
    return [line[4:] if line.strip() else line for line in lines]


def pick_sync(lines: List[str]) -> List[str]:
    """Pass 1: keep the # SYNC side of every seam."""
    out: List[str] = []
    i = 0
    while i < len(lines):
        line, stripped = lines[i], lines[i].strip()
        indent = _indent(line)
        if stripped in ("if True:  # ASYNC", "if False:  # SYNC"):
            end = _block(lines, i + 1, indent)
            if stripped == "if False:  # SYNC":
                out += pick_sync(_dedent(lines[i + 1:end]))
            elif end < len(lines) and lines[end] == " " * indent + "else:  # SYNC\n":
                stop = _block(lines, end + 1, indent)
                out += pick_sync(_dedent(lines[end + 1:stop]))
                end = stop
            i = end
            continue
        if stripped == "# SYNC docstring:":
            # Drop the async docstring just above: back from its last line to the one that opens it.
            j = len(out) - 1
            while not (out[j].lstrip().startswith('"""') and (j < len(out) - 1 or out[j].count('"""') == 2)):
                j -= 1
            del out[j:]
            i += 1
            continue
        out.append(line)
        i += 1
    return out


def _space_after(text: str, pos: int) -> int:
    n = 0
    while pos + n < len(text) and text[pos + n] == " ":
        n += 1
    return n


def unasync_tokens(text: str) -> str:
    """Pass 2: drop async and await, rename by RENAMES."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def offset(pos: "tuple[int, int]") -> int:
        return starts[pos[0] - 1] + pos[1]

    out: List[str] = []
    prev, drop_gap = 0, False
    dropped: List["tuple[int, int, int]"] = []  # (row, column, width) of what went from this logical line
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.ENDMARKER:
            break
        start, end = offset(tok.start), offset(tok.end)
        gap = text[prev:start]
        if dropped and "\n" not in gap and tok.start[1] == len(gap):
            # A continuation line aligned with something after a dropped word (not a hanging indent) moves
            # left with it.
            gap = gap[:len(gap) - sum(w for row, col, w in dropped if row < tok.start[0] and col + w <= len(gap))]
        if not drop_gap:
            out.append(gap)
        drop_gap = False
        src = text[start:end]
        if tok.type == tokenize.NEWLINE:
            dropped = []
        if tok.type == tokenize.NAME and src in ("async", "await"):
            drop_gap = True  # and the space after it
            dropped.append((tok.start[0], tok.start[1], offset(tok.end) - start + _space_after(text, end)))
        elif tok.type == tokenize.NAME:
            out.append(RENAMES.get(src, src))
        elif tok.type in _STRINGS:
            out.append(_WORD.sub(lambda m: RENAMES[m.group(1)], src))
        else:
            out.append(src)
        prev = end
    out.append(text[prev:])
    return "".join(out)


def generate(async_source: str, name: str = "_async.py") -> str:
    """The text of the sync module for the text of async module name."""
    return HEADER.format(source=name) + unasync_tokens("".join(pick_sync(async_source.splitlines(keepends=True))))


def main(argv: List[str]) -> int:
    stale = []
    for source, target in MODULES.items():
        want = generate((SRC / source).read_text(), source)
        if (SRC / target).read_text() == want:
            continue
        if "--check" in argv:
            stale.append(target)
        else:
            (SRC / target).write_text(want)
    for target in stale:
        print(f"src/lizard/{target} is not what its async source generates; run: python sdk/python/scripts/gen_sync.py",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
