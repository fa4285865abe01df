"""Which of py-spy's unnamed compiled frames sit in a system call.

py-spy names a compiled frame by the library's exported symbols; a stripped
libc exports none of its internals. A thread that hands the GIL over wakes
its waiter in ``__lll_lock_wake`` (internal), called from the internal part
of ``pthread_mutex_unlock``: both frames come as bare addresses, and three
pure Python threads contending for the GIL read "2-3 % in compiled code
(libc)". A thread's innermost address right after the machine's system-call
instruction (or at it, ``in_syscall`` says when) is in the kernel: waiting
or handing over (``analysis.native.WAITS``), not working in compiled code.
The instruction is read from the library's file, at the address's place in
the mapping this process has of it (``/proc/self/maps``).

Read in the process py-spy recorded, while its mappings are those the
addresses were sampled in.
"""

from __future__ import annotations

import bisect
import platform
import re
from collections.abc import Iterable
from typing import NamedTuple, TypeVar

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


#: A frame py-spy could not name: its address, and in a dump its library
#: ("0x7f08ef78b874 (libc.so.6)").
_UNNAMED = re.compile(r"(0x[0-9a-fA-F]+)(?: \(.*\))?")

Key = TypeVar("Key")


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
    past a system-call instruction, or at one: a thread that ptrace stopped in
    a call (py-spy attaches so) is let go with its address moved back onto
    the instruction, to make the call again, and an attach that comes while
    it goes back finds it there (10 in 3,000 attach and detach rounds of a
    blocked thread). (A trace has a few tens of distinct unnamed innermost
    addresses: each is read on its own.)"""
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
        at = address - where.start + where.offset  # in the file
        size = len(instruction)
        try:
            with open(where.path, "rb") as library:
                library.seek(max(at - size, 0))
                before = library.read(min(at, size))
                after = library.read(size)
        except OSError:
            continue  # the file went, or cannot be read: left unnamed
        if instruction in (before, after):
            found.add(address)
    return found


def address_of(frame: str) -> int | None:
    """The address of a frame py-spy could not name; None for a named one."""
    found = _UNNAMED.fullmatch(frame)
    return int(found.group(1), 16) if found else None


def named_in_syscall(innermost: dict[Key, str]) -> set[Key]:
    """Of these innermost frames (by any key), those py-spy could not name
    and ``in_syscall``: the ones to name SYSCALL."""
    addresses = {
        key: address
        for key, frame in innermost.items()
        if (address := address_of(frame)) is not None
    }
    called = in_syscall(addresses.values())
    return {key for key, address in addresses.items() if address in called}
