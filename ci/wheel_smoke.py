"""The installed wheel's smoke suite (ci/wheel_test.sh runs it with the venv's Python, inside
the mount namespace that hides the system's copies of the libraries the wheel bundles).

    python ci/wheel_smoke.py REPO WORK_DIR

Checks, each against the installed package (not the source tree): the module opens the
sample dataset and its batches equal `tokenfeed dump`'s for the same config; `tokenfeed
prepare` of the sample conversations writes the shipped sample dataset again, which the
module opens; `tokenfeed inspect` (and --deep, which hashes every shard with libcrypto)
reads it; the stubs and py.typed are installed; `tokenfeed --version` is the module's
version. The command is run through the console script, which executes the bundled
executable, so both ELF files of the wheel load under the hiding. Exits non-zero on the
first failure."""
import subprocess
import sys
from pathlib import Path

import numpy as np

import tokenfeed

BATCHES = 6


def command(*args):
    """Runs the venv's `tokenfeed` console script; returns its stdout."""
    exe = Path(sys.executable).parent / "tokenfeed"
    done = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"tokenfeed {' '.join(map(str, args))}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def check(ok, what):
    if not ok:
        sys.exit(f"wheel smoke: FAILED: {what}")
    print(f"ok  {what}")


def main():
    repo, work = Path(sys.argv[1]), Path(sys.argv[2])
    package = Path(tokenfeed.__file__).resolve().parent
    check(Path(sys.prefix).resolve() in package.parents, f"tokenfeed imported from the venv ({package})")
    check((package / "_tokenfeed.pyi").is_file() and (package / "py.typed").is_file(), "stubs and py.typed installed")
    check(command("--version").strip() == f"tokenfeed {tokenfeed.__version__}",
          f"tokenfeed --version is the module's {tokenfeed.__version__}")

    tokenfeed.set_logging(False)
    sample = repo / "data/sample/sample.xml"
    command("dump", "--config", sample, "--batches", BATCHES, "--out", work / "dump")
    dumped = {p.stem: np.load(p) for p in (work / "dump").glob("*.npy")}
    with tokenfeed.Loader(sample) as loader:
        got = [{k: v.copy() for k, v in b.arrays().items()} for b in loader.iter("train", steps=BATCHES)]
    for field in ("x", "y", "mask"):
        check(np.array_equal(np.concatenate([b[field] for b in got]), dumped[field]),
              f"{BATCHES} batches of sample.xml: {field} equals tokenfeed dump's")

    prepared = work / "prepared"
    command("prepare", "--input", repo / "data/sample/conversations.jsonl", "--output-dir", prepared,
            "--tokenizer", "bytes", "--val-split", "0.1", "--seed", "0")
    shipped = repo / "data/sample/sft"
    for shard in sorted(shipped.glob("*/shard_*/*")):
        mine = prepared / shard.relative_to(shipped)
        check(mine.is_file() and mine.read_bytes() == shard.read_bytes(),
              f"prepare wrote {shard.relative_to(shipped)} as in data/sample/sft")
    with tokenfeed.Loader({"dataset_dir": str(prepared), "block_size": 256, "batch_size": 4,
                           "use_loss_mask": True, "audit_log_dir": ""}) as loader:
        check(loader.get_batch("train").x.shape == (4, 256), "the module opens the prepared dataset")
    report = command("inspect", prepared)
    check("train" in report and "val" in report, "tokenfeed inspect reads the prepared dataset")
    command("inspect", prepared, "--deep")
    check(True, "tokenfeed inspect --deep verifies its checksums")
    print("wheel smoke: all passed")


if __name__ == "__main__":
    main()
