"""Creating and destroying 2,000 loaders (each taking a batch and dropping it) leaks no
threads, memory mappings, file descriptors or memory: counts from /proc/self."""
import gc
import os

import pytest

import tokenfeed
from conftest import base_keys


def proc_counts():
    counts = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Threads", "VmRSS"):
                counts[key] = int(value.split()[0])
    with open("/proc/self/maps") as f:
        counts["maps"] = sum(1 for _ in f)
    counts["fds"] = len(os.listdir("/proc/self/fd"))
    return counts


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
def test_two_thousand_loaders_leak_nothing(sft_dir):
    keys = base_keys(sft_dir, use_loss_mask=True, decode_threads=2)

    def cycle():
        loader = tokenfeed.Loader(keys)
        batch = loader.get_batch("train")
        loader.get_batch("val")
        del batch
        loader.close()

    for _ in range(50):  # warm-up: TBB's workers, allocator arenas
        cycle()
    gc.collect()
    before = proc_counts()
    for _ in range(2000):
        cycle()
    gc.collect()
    after = proc_counts()
    # oneTBB starts its worker threads lazily, one when an arena next asks for one, and keeps
    # them: the two splits' arenas (decode_threads=2 each) may raise the pool by that many at
    # any point of the run, which timing decides (seen at cycle 400 or 1,600, then steady). A
    # thread leaked per loader, or per hundred, would show as tens or hundreds.
    pool_growth = 2 * 2
    assert after["Threads"] <= before["Threads"] + pool_growth, (before, after)
    assert after["fds"] <= before["fds"], (before, after)
    # Each thread the pool grew by brings mappings of its own: its stack and guard page, and
    # often a malloc arena (its heap and the reserve beside it); 2 more threads brought 10
    # once (1927 -> 1937 maps). A mapping leaked per loader would show as thousands.
    maps_per_new_thread = 6
    new_threads = max(0, after["Threads"] - before["Threads"])
    assert after["maps"] <= before["maps"] + 8 + maps_per_new_thread * new_threads, (before, after)
    assert after["VmRSS"] <= before["VmRSS"] + 16 * 1024, (before, after)
