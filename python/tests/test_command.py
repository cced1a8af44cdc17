"""`pip install .` installs the `tokenfeed` command beside the module: a console script in
the environment's bin directory that runs the executable built into the package."""
import json
import os
import subprocess
import sys
from pathlib import Path

import tokenfeed
from conftest import REPO


def test_the_console_script_runs_the_bundled_command(tmp_path):
    script = Path(sys.executable).parent / "tokenfeed"
    assert script.exists(), f"{script}: pip install . did not install the tokenfeed command"
    r = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == f"tokenfeed {tokenfeed.__version__}", r
    # A real run through it: prepare, then inspect the result.
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": "hello"}]}) + "\n")
    r = subprocess.run([str(script), "prepare", "--input", str(chats), "--output-dir", str(tmp_path / "ds"),
                        "--val-split", "0"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "tokenfeed prepare: wrote" in r.stdout, r
    r = subprocess.run([sys.executable, "-m", "tokenfeed", "inspect", str(tmp_path / "ds"), "--print-config"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "<training>" in r.stdout, r
    # The exit status is the command's.
    r = subprocess.run([str(script), "dump"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--config" in r.stderr, r
