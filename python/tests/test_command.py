"""`pip install .` installs the `tokenfeed` command beside the module: a console script in
the environment's bin directory that runs the executable built into the package."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_console_script_hands_python_work_to_its_own_interpreter(tmp_path):
    """A venv's bin/tokenfeed, the venv not activated: parquet input runs in the venv's
    Python, not in the python3 first on PATH; TOKENFEED_PYTHON still wins, and a failure
    names the interpreter tried and why it was chosen."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    script = Path(sys.executable).parent / "tokenfeed"
    pq.write_table(pa.table({"text": ["one document", "another"]}), tmp_path / "c.parquet")
    decoy = tmp_path / "bin" / "python3"  # the python3 on PATH: another interpreter
    decoy.parent.mkdir()
    decoy.write_text("#!/bin/sh\necho 'the python3 on PATH ran' >&2\nexit 99\n")
    decoy.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("TOKENFEED_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{decoy.parent}:/usr/bin:/bin"

    def prepare(out, **extra):
        return subprocess.run([str(script), "prepare-text", str(tmp_path / "c.parquet"), "--output-dir",
                               str(tmp_path / out), "--val-split", "0"], capture_output=True, text=True,
                              timeout=120, env={**env, **extra})

    r = prepare("a")
    assert r.returncode == 0 and "prepare-text: wrote" in r.stdout, r
    r = prepare("b", TOKENFEED_PYTHON=str(decoy))
    assert r.returncode == 99 and "the python3 on PATH ran" in r.stderr, r
    r = prepare("c", TOKENFEED_PYTHON=str(tmp_path / "no_python"))
    assert r.returncode == 2 and f"'{tmp_path / 'no_python'}' (TOKENFEED_PYTHON) cannot be started" in r.stderr, r
