"""`r3forge.procmem` against real processes: a child that holds a known amount of memory."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from r3forge.procmem import PROC, TreePeak, descendants, hwm_bytes, rss_bytes, tree_rss_bytes

pytestmark = pytest.mark.skipif(not PROC.is_dir(), reason="reads Linux's /proc")

HOLD = 300 * 2**20  # what the grandchild touches
# a shell (the child) whose own child (the grandchild) holds HOLD bytes until stdin closes
GRANDCHILD = f"import sys; b = bytearray({HOLD}); b[::4096] = b'x' * len(b[::4096]); print('ok', flush=True); sys.stdin.read()"


def test_a_grandchilds_memory_counts_in_the_tree_and_its_own_high_water_mark():
    shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{GRANDCHILD}"'], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        with TreePeak(shell.pid, interval_s=0.05) as peak:
            assert shell.stdout.readline().strip() == "ok"  # the grandchild holds its memory now
            tree = descendants(shell.pid)
            assert tree[0] == shell.pid and len(tree) == 2
            grandchild = tree[1]
            assert rss_bytes(grandchild) >= HOLD and hwm_bytes(grandchild) >= HOLD
            assert rss_bytes(shell.pid) < HOLD  # the shell itself holds little
            assert tree_rss_bytes(shell.pid) >= HOLD + rss_bytes(shell.pid)
            time.sleep(0.2)
        assert peak.bytes >= HOLD and HOLD <= peak.process_bytes < peak.bytes + 2**20
    finally:
        shell.stdin.close()
        shell.wait(timeout=30)
    assert rss_bytes(shell.pid) is None and hwm_bytes(shell.pid) is None  # gone: no figure, no error
    assert tree_rss_bytes(shell.pid) is None
