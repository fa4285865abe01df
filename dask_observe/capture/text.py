"""Texts as the capture ships them and the store keeps them: bounded in
size, and encodable. Apart from the log capture so that the store and the
server, which bound what they store alike, import no part of distributed."""

from __future__ import annotations

#: The most of one text (a line, an exception, a traceback) that is kept, in
#: UTF-8 bytes: forty lines of 10 MB were stored whole, and took the Jupyter
#: server to 3.4 GB when read. The head and the tail are kept, and the cut
#: says how much went.
MAX_TEXT_BYTES = 64 * 1024
_HEAD_BYTES = 48 * 1024


def bounded(text: str, limit: int = MAX_TEXT_BYTES) -> str:
    """``text`` itself when it fits in ``limit`` UTF-8 bytes; else its head
    and tail around a note of how many bytes were cut."""
    if len(text) <= limit // 4:  # four bytes a character at most: it fits
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text
    head = limit * _HEAD_BYTES // MAX_TEXT_BYTES
    tail = limit - head - 64
    cut = len(data) - head - tail
    return (
        data[:head].decode("utf-8", "ignore")
        + f"\n[... {cut:,} bytes cut ...]\n"
        + data[-tail:].decode("utf-8", "ignore")
    )


def shippable(text: str) -> str:
    """``text`` as a batch can carry it: a lone surrogate (what
    ``os.fsdecode`` makes of a byte that is not UTF-8) cannot be encoded, and
    one in a line made its whole batch unsendable, for good where the buffer
    kept it (every later run of the cluster stored no log line). Written as
    an escape instead, ``\\xff`` for a byte's, ``\\udXXX`` for another's;
    a text without one is returned as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join(_escaped(c) for c in text)
    return text


def _escaped(c: str) -> str:
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # a byte os.fsdecode could not decode
        return f"\\x{code - 0xDC00:02x}"
    if 0xD800 <= code <= 0xDFFF:
        return f"\\u{code:04x}"
    return c


#: The most of a task key kept with a line that task wrote.
MAX_KEY_BYTES = 4096
