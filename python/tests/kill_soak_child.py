"""The child of test_kill_soak.py: a training-like consumer that checkpoints its loader.

  kill_soak_child.py WORKDIR TOTAL_STEPS CHECKPOINT_EVERY STEP_SLEEP_S

WORKDIR holds keys.json (the loader's config keys), and this child keeps there:
  state.json   the loader state after the last checkpoint, written to a temporary file and
               renamed (never torn, whatever instant the child is killed at)
  records.txt  one line per consumed batch, "STEP CRC", flushed as written
On start it resumes from state.json when present and drops the records of the steps past
it (consumed after the checkpoint, so consumed again now). It exits 0 after TOTAL_STEPS."""
import json
import os
import sys
import time
import zlib

import numpy as np

import tokenfeed


def batch_crc(batch):
    crc = zlib.crc32(np.ascontiguousarray(batch.x).tobytes())
    crc = zlib.crc32(np.ascontiguousarray(batch.y).tobytes(), crc)
    return crc


def main():
    work, total, every, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    with open(os.path.join(work, "keys.json")) as f:
        keys = json.load(f)
    loader = tokenfeed.Loader(keys)
    state_path = os.path.join(work, "state.json")
    records_path = os.path.join(work, "records.txt")
    resumed_at = 0
    if os.path.exists(state_path):
        with open(state_path) as f:
            state = json.load(f)
        loader.load_state_dict(state)
        resumed_at = state["splits"]["train"]["step"]
    kept = []
    if os.path.exists(records_path):
        with open(records_path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and line.endswith("\n") and int(parts[0]) < resumed_at:
                    kept.append(line)
    with open(records_path, "w") as f:
        f.writelines(kept)
    with open(records_path, "a") as records:
        for batch in loader.iter("train", steps=total - resumed_at):
            records.write(f"{batch.step} {batch_crc(batch)}\n")
            records.flush()
            if (batch.step + 1) % every == 0:
                tmp = state_path + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(loader.state_dict(), f)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, state_path)
            time.sleep(pause)
    loader.close()


if __name__ == "__main__":
    main()
