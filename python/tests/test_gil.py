"""Opening a dataset and waiting in get_batch release the GIL: another Python thread keeps
running meanwhile.

The probe thread records a timestamp, then sleeps 0.2 ms (releasing the GIL), again and
again. While the main thread holds the GIL inside a C call, the probe cannot run a single
bytecode, so hardly a timestamp falls inside that call (only from the switches just before
and after it); with the GIL released, the probe stamps through it as densely as while the
main thread sleeps.
"""
import re
import threading
import time

import numpy as np
import pytest

import tokenfeed
from conftest import write_token_stream


class Probe:
    def __init__(self):
        self.stamps = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.stamps.append(time.perf_counter())
            time.sleep(0.0002)

    def __enter__(self):
        self._thread.start()
        time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def inside(self, intervals):
        """Stamps strictly inside any (start, end) interval."""
        stamps = np.array(self.stamps)
        return sum(int(((stamps > a) & (stamps < b)).sum()) for a, b in intervals)

    def density(self, intervals):
        """Stamps per millisecond inside the intervals."""
        return self.inside(intervals) / (sum(b - a for a, b in intervals) * 1e3)

    def free_density(self):
        """The density while the main thread sleeps (GIL released): what "running freely"
        means on this machine at this moment."""
        return self.density([timed(lambda: time.sleep(0.02))[1] for _ in range(5)])


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, (start, time.perf_counter())


@pytest.fixture(scope="module")
def big_stream(tmp_path_factory):
    root = tmp_path_factory.mktemp("big_stream")
    write_token_stream(root, tokens=1_500_000)
    return root


# Batches large enough that producing one takes milliseconds: with one decode thread and a
# prefetch depth of 1, a trainer that takes them as fast as it can finds the ring empty
# and waits on every call.
def slow_config(root):
    return dict(dataset_dir=str(root), batch_size=16, block_size=131072, document_aware=True,
                prefetch_depth=1, decode_threads=1, audit_log_dir="")


def test_probe_sees_a_call_that_holds_the_gil():
    # The control: a C call that keeps the GIL (sum over a range runs without a bytecode
    # boundary) leaves hardly a stamp inside itself.
    with Probe() as probe:
        free = probe.free_density()
        intervals = [timed(lambda: sum(range(2_000_000)))[1] for _ in range(5)]
    assert sum(b - a for a, b in intervals) * 1e3 > 20
    assert probe.density(intervals) < 0.25 * free, (probe.density(intervals), free)


def test_get_batch_releases_the_gil_while_waiting(big_stream):
    loader = tokenfeed.Loader(slow_config(big_stream))
    intervals = []
    with Probe() as probe:
        free = probe.free_density()
        for _ in range(25):
            batch, interval = timed(loader.get_batch)
            intervals.append(interval)
            del batch
    stats = loader.stats()
    waited_ms = stats["total_wait_us"] / 1e3
    assert stats["waits"] >= 20, stats  # the ring was empty on (nearly) every call
    # The probe runs inside get_batch about as freely as while the main thread sleeps (with
    # the GIL held: a hundredth of that, and at most a couple of stamps per call).
    density = probe.density(intervals)
    assert density >= 0.25 * free, (density, free, waited_ms)
    assert probe.inside(intervals) >= 4 * len(intervals)


def test_opening_a_dataset_releases_the_gil(tmp_path):
    # A million episodes: opening validates the index (O(episodes)) and takes a while.
    n = 1_000_000
    with tokenfeed.DatasetWriter(tmp_path / "train", token_dtype="uint16", write_mask=False) as w:
        w.add_many(np.tile(np.array([5, 6], dtype=np.uint32), n), np.full(n, 2))
    tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16", mask_dtype=None, eot_token_id=0)
    config = dict(dataset_dir=str(tmp_path), batch_size=8, block_size=16, audit_log_dir="")
    with Probe() as probe:
        free = probe.free_density()
        intervals = [timed(lambda: tokenfeed.Loader(config))[1] for _ in range(3)]
    density = probe.density(intervals)
    assert density >= 0.25 * free, (density, free, sum(b - a for a, b in intervals) * 1e3)
    assert probe.inside(intervals) >= 10


def test_stop_wakes_a_blocked_get_batch(big_stream):
    loader = tokenfeed.Loader(slow_config(big_stream))
    loader.get_batch()  # started
    stopper = threading.Timer(0.05, loader.stop)
    stopper.start()
    with pytest.raises(tokenfeed.UsageError, match="stopped"):
        for _ in range(10_000):  # each call waits for a decode; stop() lands during one
            loader.get_batch()
    stopper.join()


def test_stop_and_close_from_other_threads(big_stream, sft_dir):
    # stop() takes no lock that a blocked get_batch holds, yet must not use a loader that
    # close() in another thread is freeing: a trainer thread waits in get_batch, a second
    # thread calls stop() in a loop, and the main thread closes the loader. close() returns,
    # the trainer gets UsageError, nothing crashes. (Repeated on a small dataset to give the
    # race between stop() and close() its chances.)
    configs = [slow_config(big_stream)] + [dict(dataset_dir=str(sft_dir), batch_size=4, block_size=64,
                                                 audit_log_dir="", prefetch_depth=1, decode_threads=1)] * 20
    for config in configs:
        loader = tokenfeed.Loader(config)
        loader.get_batch()
        errors, done = [], threading.Event()

        def trainer():
            try:
                for _ in range(100_000):
                    loader.get_batch()
            except tokenfeed.UsageError as e:
                errors.append(str(e))

        def stopper():
            while not done.is_set():
                loader.stop()

        threads = [threading.Thread(target=trainer), threading.Thread(target=stopper)]
        for t in threads:
            t.start()
        time.sleep(0.01)
        loader.close()
        done.set()
        for t in threads:
            t.join(timeout=60)
            assert not t.is_alive()
        assert loader.closed and len(errors) == 1 and re.search("stopped|closed", errors[0]), errors
        loader.stop()  # after close: nothing to stop


def test_stall_fraction_counts_data_waits_and_slow_call_fraction_slow_calls(big_stream):
    # As in `tokenfeed bench`: stall_fraction is the fraction of steps whose batch waited
    # > 50 us for data (Batch.wait_us), slow_call_fraction that of calls that took > 50 us
    # for any reason. Here another thread keeps the loader busy with val batches that are
    # never ready, so every train call first waits for the loader's lock: slow, whether or
    # not its batch then waited for data (the trainer sleeps between calls, so it often did
    # not). Counting slow calls as stalls would make the two fractions equal.
    config = dict(slow_config(big_stream), batch_size=4)
    loader = tokenfeed.Loader(config)
    done = threading.Event()

    def val_reader():
        while not done.is_set():
            loader.get_batch("val")

    waits, durations = [], []
    thread = threading.Thread(target=val_reader)
    thread.start()
    try:
        for _ in range(20):
            time.sleep(0.1)
            start = time.perf_counter()
            batch = loader.get_batch("train")
            durations.append((time.perf_counter() - start) * 1e6)
            waits.append(batch.wait_us)
            del batch
    finally:
        done.set()
        thread.join()
    s = loader.stats("train")
    assert s["batches"] == 20
    assert s["stall_fraction"] == sum(w > 50 for w in waits) / 20
    assert s["waits"] == sum(w > 0 for w in waits) and s["total_wait_us"] == pytest.approx(sum(waits))
    # A call is at least as long as its batch's wait, and at most as long as Python saw it.
    assert sum(w > 50 for w in waits) / 20 <= s["slow_call_fraction"] <= sum(d > 50 for d in durations) / 20
    assert s["slow_call_fraction"] >= 0.8, (s["slow_call_fraction"], waits)
    assert s["slow_call_fraction"] > s["stall_fraction"], (s["stall_fraction"], waits)
    assert loader.stats("val")["stall_fraction"] > 0.5  # the val reader did wait for data
