"""perf/soak.py, the long-run check, on a short run: it samples RSS, threads, fds and maps
from /proc/self and reports no growth for a loader that leaks nothing."""
import os
import re
import subprocess
import sys

import pytest

from conftest import write_config

SOAK = os.path.join(os.path.dirname(__file__), "..", "..", "perf", "soak.py")


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
def test_short_soak_reports_no_growth(sft_dir, tmp_path):
    config = tmp_path / "soak.xml"
    write_config(config, dataset_dir=str(sft_dir), batch_size=4, block_size=64, audit_log_dir="", use_loss_mask=True)
    r = subprocess.run([sys.executable, SOAK, "--config", str(config), "--seconds", "3", "--every", "1",
                        "--consumer-ms", "1", "--warmup", "20"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    samples = re.findall(r"^soak t=\d+s steps=(\d+) rss_mb=[\d.]+ rss_anon_mb=[\d.]+ threads=\d+ fds=\d+ maps=\d+$",
                         r.stdout, re.M)
    assert len(samples) >= 3 and int(samples[-1]) > 0, r.stdout
    assert r.stdout.strip().splitlines()[-1].endswith("no growth"), r.stdout
