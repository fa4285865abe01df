"""Which of py-spy's unnamed compiled frames sit in a system call.

py-spy names a compiled frame by the library's exported symbols; a stripped
libc exports none of its internals. A thread that hands the GIL over wakes
its waiter in ``__lll_lock_wake`` (internal), called from the internal part
of ``pthread_mutex_unlock``: both frames come as bare addresses, and three
pure Python threads contending for the GIL read "2-3 % in compiled code
(libc)". A thread's innermost address right after the machine's system-call
instruction is in the kernel: waiting or handing over
(``analysis.native.WAITS``), not working in compiled code. The instruction
is read from the library's file, at the address's place in the mapping this
process has of it (``/proc/self/maps``).

Read in the process py-spy recorded, while its mappings are those the
addresses were sampled in.
"""

from __future__ import annotations

import bisect
import platform
from collections.abc import Iterable
from typing import NamedTuple

#: The name given to such a frame (``analysis.native.WAITS`` has it).
SYSCALL = "syscall"

#: The system-call instruction, by machine: a thread in the kernel has its
#: user-space address just past it.
INSTRUCTIONS = {
    "x86_64": b"\x0f\x05",  # syscall
    "amd64": b"\x0f\x05",
    "aarch64": b"\x01\x00\x00\xd4",  # svc #0
    "arm64": b"\x01\x00\x00\xd4",
}


class Mapping(NamedTuple):
    start: int
    end: int
    offset: int  # in the file, of the mapping's start
    path: str


def mappings(maps: str = "/proc/self/maps") -> list[Mapping]:
    """This process's mappings of files, by start address (none where the
    system has no /proc)."""
    found = []
    try:
        with open(maps) as lines:
            for line in lines:
                parts = line.split(maxsplit=5)
                if len(parts) < 6 or not parts[5].startswith("/"):
                    continue  # anonymous memory, the stack, the heap
                start, end = (int(a, 16) for a in parts[0].split("-"))
                found.append(Mapping(start, end, int(parts[2], 16), parts[5].strip()))
    except (OSError, ValueError):
        return []
    return sorted(found)


def in_syscall(addresses: Iterable[int]) -> set[int]:
    """Of these addresses (a thread's innermost, in this process), those just
    past a system-call instruction. (A trace has a few tens of distinct
    unnamed innermost addresses: each is read on its own.)"""
    instruction = INSTRUCTIONS.get(platform.machine().lower())
    wanted = set(addresses)
    if instruction is None or not wanted:
        return set()
    maps = mappings()
    starts = [m.start for m in maps]
    found: set[int] = set()
    for address in wanted:
        i = bisect.bisect_right(starts, address) - 1
        if i < 0 or not maps[i].start <= address < maps[i].end:
            continue
        where = maps[i]
        at = address - where.start + where.offset - len(instruction)
        if at < 0:
            continue
        try:
            with open(where.path, "rb") as library:
                library.seek(at)
                if library.read(len(instruction)) == instruction:
                    found.add(address)
        except OSError:
            continue  # the file went, or cannot be read: left unnamed
    return found
