"""Resident memory of a process and of its whole process tree, read from Linux's /proc (no dependency).

Two figures, because one process can hide behind another: a process's own high-water mark (`VmHWM`, kept
by the kernel) and the summed resident memory of a process and all its descendants, which no kernel counter
keeps. `TreePeak` samples both on a thread. On a system without /proc every figure is None.

    with TreePeak(proc.pid) as peak:
        proc.wait()
    peak.bytes          # the largest tree-wide sum seen (sampled every `interval_s`)
    peak.process_bytes  # the largest high-water mark of any one process of the tree

Why not `ru_maxrss` from `wait4`: Linux folds the memory map a child had before `exec` (its parent's, copied
by `fork`) into the child's maxrss, so a small command started by a large Python process reports the
parent's size.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

PROC = Path("/proc")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it (children of children too), from each process's ppid."""
    children: dict[int, list[int]] = {}
    for entry in PROC.glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while we looked
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def rss_bytes(pid: int) -> int | None:
    """A live process's resident memory now (None once it has exited or without /proc)."""
    try:
        return int((PROC / str(pid) / "statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return None


def hwm_bytes(pid: int) -> int | None:
    """A live process's peak resident memory so far (the kernel's VmHWM), None without /proc."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def tree_rss_bytes(pid: int) -> int | None:
    """Summed resident memory of `pid` and its descendants now (shared pages count once per process)."""
    sizes = [s for p in descendants(pid) if (s := rss_bytes(p)) is not None]
    return sum(sizes) if sizes else None


class TreePeak:
    """Samples the tree of `pid` every `interval_s` seconds on a daemon thread while in the `with` block.
    `bytes`: the largest sum of resident memory over the tree seen (a peak shorter than the interval can be
    missed). `process_bytes`: the largest kernel high-water mark of any one process of the tree (exact but
    for growth in a process's last `interval_s` before it exits). Both None if /proc had nothing."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self.pid, self.interval_s = pid, interval_s
        self.bytes: int | None = None
        self.process_bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tree-peak-{pid}", daemon=True)

    def sample(self) -> None:
        tree = descendants(self.pid)
        sizes = [s for p in tree if (s := rss_bytes(p)) is not None]
        marks = [m for p in tree if (m := hwm_bytes(p)) is not None]
        if sizes:
            self.bytes = max(self.bytes or 0, sum(sizes))
        if marks:
            self.process_bytes = max(self.process_bytes or 0, *marks)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> TreePeak:
        if PROC.is_dir():
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def gib(n: int | None) -> float | None:
    """Bytes as GiB, 2 decimals (None stays None).

    >>> gib(3 * 2**30 // 2), gib(None)
    (1.5, None)
    """
    return None if n is None else round(n / 2**30, 2)
