"""examples/train_tiny_gpt.py runs through the module and its loss falls (a short run)."""
import subprocess
import sys

import pytest

from conftest import REPO


def test_tiny_gpt_learns():
    pytest.importorskip("torch")
    result = subprocess.run([sys.executable, str(REPO / "examples" / "train_tiny_gpt.py"), "--steps", "50", "--check"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "step   50" in result.stdout and "val loss" in result.stdout
