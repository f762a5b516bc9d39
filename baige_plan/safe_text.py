"""Text from user input on its way to a terminal: control and format characters (ESC sequences, bell,
carriage return, bidi overrides) are shown escaped (`\\x1b`, `\\u202e`), never sent raw (issue 19: raw
terminal escape codes from option values, config names and file names reached the terminal)."""

from __future__ import annotations

import unicodedata

_KEEP = {"\n", "\t"}


def _bad(ch: str) -> bool:
    return ch not in _KEEP and unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")


def printable(text: str, keep_newlines: bool = True) -> str:
    """`text` with every control/format character written as its Python escape."""
    text = str(text)
    if text.isprintable() and (keep_newlines or "\n" not in text):
        return text
    out = []
    for ch in text:
        if (_bad(ch)) or (ch == "\n" and not keep_newlines):
            out.append(ch.encode("unicode_escape").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def one_line(text: str, longest: int = 200, total: int = 1000) -> str:
    """An error message as one printable line: whitespace runs become one space, control characters are
    escaped, a word longer than `longest` characters (a 5,000-digit number echoed back) is cut to its first
    80 characters and its length, and a line longer than `total` (a 10,000-item list echoed back) to its first
    600 characters (the file, field and reason come first) and its length."""
    words = []
    for w in str(text).split():
        w = printable(w, keep_newlines=False)
        words.append(w if len(w) <= longest else     # a cut "FILE:" keeps its colon: the file is still named
                     f"{w[:80]}...({len(w):,} characters)" + (":" if w.endswith(":") else ""))
    line = " ".join(words)
    return line if len(line) <= total else f"{line[:600]} ... ({len(line):,} characters)"
