"""prepare-text as N tasks (issue 42.1): three tasks as plain processes, one killed with SIGKILL
and resumed, merged into the documents, order, ids and train/val split of a one-process run;
a missing or unfinished part refused by name; --task auto from Slurm's and a Kubernetes
indexed Job's variables; byte ranges of one large file giving every document exactly once;
the Python doors, and tokenfeed.ray on a local Ray cluster with a task killed once and retried."""
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import tokenfeed

WORDS = "the loader reads tokens from memory mapped files naïve café 東京 données 🙂 a b c corpus".split()


def write_corpus(root, files, seed=0, bad_every=0):
    """JSONL files of random documents ({name: count}); an empty document every 37th line, a blank
    line every 53rd, CRLF endings on some lines, a bad line every `bad_every`th when set."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for name, count in files.items():
        with open(root / name, "w", encoding="utf-8", newline="") as f:
            for i in range(count):
                if bad_every and i % bad_every == 3:
                    f.write('{"text": 5}\n')
                    continue
                if i % 53 == 9:
                    f.write("\n")
                    continue
                text = "" if i % 37 == 1 else f"{name} {i} " + " ".join(
                    rng.choice(WORDS) for _ in range(rng.randint(1, 600 if i % 400 == 7 else 60)))
                f.write(json.dumps({"text": text}, ensure_ascii=False) + ("\r\n" if i % 5 == 0 else "\n"))


def read_split(split_dir):
    """The documents of a tokens-format split, in order (their ordinal is their id)."""
    docs = []
    for shard in sorted(Path(split_dir).glob("shard_*.docs.npy")):
        tokens = np.load(shard.with_name(shard.name.replace(".docs.npy", ".npy")))
        starts = [int(s) for s in np.load(shard)] + [len(tokens)]
        docs.extend(tokens[a:b].tobytes() for a, b in zip(starts, starts[1:]))
    return docs


def assert_same_dataset(one, merged):
    """The same documents, ids (order) and train/val assignment; the same metadata but for the
    shard counts and checksums, which follow the shard boundaries; every shard's checksum right."""
    for split in ("train", "val"):
        assert read_split(merged / split) == read_split(one / split), split
    a = json.loads((one / "dataset_metadata.json").read_text())
    b = json.loads((merged / "dataset_metadata.json").read_text())
    for meta in (a, b):
        meta.pop("content_sha256")
        for split in ("train", "val"):
            meta["splits"][split].pop("shards")
    assert a == b
    assert sorted(p.name for p in merged.iterdir()) == sorted(p.name for p in one.iterdir())
    assert not [p for p in merged.parent.iterdir() if p.name.startswith(".")]


def files_and_bytes(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "dataset_metadata.json"}


def run(cli, *args, env=None, expect=0):
    r = subprocess.run([cli, "prepare-text", *map(str, args)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == expect, (args, r.returncode, r.stderr)
    return r


def test_three_tasks_one_killed_and_resumed_merge_into_the_one_process_dataset(cli, tmp_path):
    write_corpus(tmp_path / "in", {"a.jsonl": 4000, "big.jsonl": 60000, "c.jsonl": 3000})
    common = [tmp_path / "in" / "*.jsonl", "--val-split", "0.05", "--shard-tokens", "200000", "--workers", "1",
              "--progress-seconds", "0"]
    run(cli, *common, "--output-dir", tmp_path / "one")
    out = tmp_path / "tasks"
    tasks = [*common, "--output-dir", out, "--num-tasks", "3", "--max-part-bytes", "2000000", "--resume"]
    # Tasks 0 and 2 run concurrently while task 1 is killed once it has finished a shard.
    others = [subprocess.Popen([cli, "prepare-text", *map(str, tasks), "--task", str(i)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True) for i in (0, 2)]
    p = subprocess.Popen([cli, "prepare-text", *map(str, tasks), "--task", "1"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    journal = []
    while not journal and p.poll() is None and time.monotonic() < deadline:
        journal = [j for j in (out / "parts").glob(".1.tmp-*/prepare_text_shards.jsonl") if j.stat().st_size > 0]
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL and journal, "task 1 ended before it was killed mid-run"
    for o in others:
        _, err = o.communicate(timeout=300)
        assert o.returncode == 0, err
    # The merge refuses while task 1 is unfinished, naming it.
    r = run(cli, "--merge", out, expect=2)
    assert "task 1 unfinished" in r.stderr and "--resume" in r.stderr and "task 0" not in r.stderr
    r = run(cli, *tasks, "--task", "1")
    assert "kept from the killed run" in r.stdout
    run(cli, "--merge", out)
    assert not (out / "parts").exists()
    assert_same_dataset(tmp_path / "one", out)
    r = subprocess.run([cli, "inspect", str(out), "--deep"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "content checksums ok" in r.stdout, r.stdout + r.stderr


def test_with_one_document_a_shard_the_merged_files_are_the_one_process_bytes(cli, tmp_path):
    """Shards cut alike (a shard per document) make the same files: the content fingerprint,
    which hashes the shards' bytes, is then the same too."""
    write_corpus(tmp_path / "in", {"a.jsonl": 150, "b.jsonl": 400}, seed=5)
    common = [tmp_path / "in" / "*.jsonl", "--val-split", "0.2", "--shard-tokens", "1"]
    run(cli, *common, "--output-dir", tmp_path / "one")
    for i in range(4):
        run(cli, *common, "--output-dir", tmp_path / "m", "--task", i, "--num-tasks", 4, "--max-part-bytes", 5000)
    run(cli, "--merge", tmp_path / "m")
    assert files_and_bytes(tmp_path / "m") == files_and_bytes(tmp_path / "one")
    assert_same_dataset(tmp_path / "one", tmp_path / "m")


def test_a_missing_part_and_a_changed_task_count_are_refused(cli, tmp_path):
    write_corpus(tmp_path / "in", {"a.jsonl": 300, "b.jsonl": 300})
    common = [tmp_path / "in" / "*.jsonl", "--output-dir", tmp_path / "out"]
    run(cli, *common, "--task", 0, "--num-tasks", 3)
    r = run(cli, "--merge", tmp_path / "out", expect=2)
    assert "task 1 missing" in r.stderr and "task 2 missing" in r.stderr and str(tmp_path / "out") in r.stderr
    r = run(cli, *common, "--task", 1, "--num-tasks", 4, expect=2)
    assert "prepared as 3 tasks" in r.stderr and "--num-tasks" in r.stderr
    r = run(cli, *common, "--task", 1, "--num-tasks", 3, "--seed", 9, expect=2)
    assert "differ from its other tasks'" in r.stderr
    r = run(cli, *common, "--task", 0, "--num-tasks", 3, expect=2)
    assert "task 0" in r.stderr and "finished already" in r.stderr
    run(cli, *common, "--task", 3, "--num-tasks", 3, expect=2)
    assert (tmp_path / "out" / "parts" / "0" / "dataset_metadata.json").exists()  # nothing was merged


def test_task_auto_reads_slurm_and_kubernetes_indexed_job_variables(cli, tmp_path):
    write_corpus(tmp_path / "in", {"a.jsonl": 500, "b.jsonl": 700})
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("SLURM_") and k != "JOB_COMPLETION_INDEX"}
    common = [tmp_path / "in" / "*.jsonl", "--val-split", "0.1", "--task", "auto"]
    run(cli, *common, "--output-dir", tmp_path / "one", env=base, expect=2)  # neither is set
    run(cli, tmp_path / "in" / "*.jsonl", "--val-split", "0.1", "--output-dir", tmp_path / "one")
    slurm = {**base, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}
    r = run(cli, *common, "--output-dir", tmp_path / "s", env=slurm)
    assert (tmp_path / "s" / "parts" / "1" / "dataset_metadata.json").exists() and "task 1 of 3" in r.stdout
    r = run(cli, *common, "--output-dir", tmp_path / "s", env={**slurm, "SLURM_ARRAY_TASK_ID": "3"}, expect=2)
    assert "SLURM_ARRAY_TASK_ID 3" in r.stderr
    r = run(cli, *common, "--output-dir", tmp_path / "s", "--num-tasks", 2, env=slurm, expect=2)
    assert "SLURM_ARRAY_TASK_COUNT" in r.stderr
    # An array numbered from 1 (--array=1-3): the index counts from SLURM_ARRAY_TASK_MIN.
    run(cli, *common, "--output-dir", tmp_path / "s",
        env={**slurm, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_MIN": "1"})
    k8s = {**base, "JOB_COMPLETION_INDEX": "2"}
    r = run(cli, *common, "--output-dir", tmp_path / "s", env=k8s, expect=2)
    assert "--num-tasks" in r.stderr
    run(cli, *common, "--output-dir", tmp_path / "s", "--num-tasks", 3, env=k8s)
    run(cli, "--merge", tmp_path / "s")
    assert_same_dataset(tmp_path / "one", tmp_path / "s")


def test_byte_ranges_of_one_large_file_give_every_document_exactly_once(cli, tmp_path):
    write_corpus(tmp_path / "in", {"big.jsonl": 3000}, seed=7, bad_every=101)
    with open(tmp_path / "in" / "lines.txt", "w", encoding="utf-8") as f:
        for i in range(2000):
            f.write("" if i % 29 == 0 else f"line {i} " + "x" * (i % 300))
            f.write("\n")
    size = (tmp_path / "in" / "big.jsonl").stat().st_size
    for name, args in (("jsonl", [tmp_path / "in" / "big.jsonl", "--on-error", "skip"]),
                       ("text", [tmp_path / "in" / "lines.txt", "--doc-per", "line"])):
        common = [*args, "--val-split", "0.1"]
        run(cli, *common, "--output-dir", tmp_path / f"{name}-one")
        out = tmp_path / f"{name}-tasks"
        for i in range(5):  # ranges of 997 bytes: many fall inside a long line and hold no line start
            run(cli, *common, "--output-dir", out, "--task", i, "--num-tasks", 5, "--max-part-bytes", 997)
        ranges = [json.loads((out / "parts" / str(i) / "dataset_metadata.json").read_text())["part"]["ranges"]
                  for i in range(5)]
        cuts = [(r["begin"], r["end"]) for part in ranges for r in part]
        assert cuts[0][0] == 0 and all(a[1] == b[0] for a, b in zip(cuts, cuts[1:])) and len(cuts) > 50
        if name == "jsonl":
            assert cuts[-1][1] == size
        run(cli, "--merge", out)
        assert_same_dataset(tmp_path / f"{name}-one", out)
    meta = json.loads((tmp_path / "jsonl-tasks" / "dataset_metadata.json").read_text())
    assert meta["skipped"]["not_a_string"] == 30 and meta["documents"]["blank_lines"] > 0


def content_lines(cli, dataset):
    """Each split's content identity as `tokenfeed inspect --deep` prints it: its fingerprint and
    its SHA-256, train's then val's."""
    r = subprocess.run([cli, "inspect", str(dataset), "--deep"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    values = []
    for words in (line.split() for line in r.stdout.splitlines()):
        if words[:1] == ["content"]:
            values.append(words[1])
        elif words[:1] == ["sha256"]:
            values.append(words[1])
    assert len(values) == 4, r.stdout
    return values


@pytest.mark.parametrize("fmt", ["tokens", "episodes"])
def test_one_process_and_merged_tasks_are_the_same_content_in_other_shards(cli, tmp_path, fmt):
    """Issue 42: the content identity inspect prints does not depend on where the shards end; one
    token changed changes it (the fingerprint and the SHA-256)."""
    write_corpus(tmp_path / "in", {"a.jsonl": 300, "b.jsonl": 700}, seed=3)
    common = [tmp_path / "in" / "*.jsonl", "--val-split", "0.1", "--format", fmt, "--progress-seconds", "0"]
    run(cli, *common, "--shard-tokens", "3000", "--output-dir", tmp_path / "one")
    for i in range(3):
        run(cli, *common, "--shard-tokens", "2000", "--output-dir", tmp_path / "m", "--task", i, "--num-tasks", 3,
            "--max-part-bytes", 20000)
    run(cli, "--merge", tmp_path / "m")
    shards = {d: sorted(str(p.relative_to(tmp_path / d)) for p in (tmp_path / d / "train").iterdir())
              for d in ("one", "m")}
    assert shards["one"] != shards["m"]
    tokens = {d: tokenfeed.inspect(tmp_path / d)["splits"]["train"]["tokens"] for d in ("one", "m")}
    assert tokens["one"] == tokens["m"]
    one = content_lines(cli, tmp_path / "one")
    assert content_lines(cli, tmp_path / "m") == one
    report = tokenfeed.inspect(tmp_path / "m", deep=True)["splits"]["train"]
    assert [report["layout_free_fingerprint"], report["deep"]["content_sha256"]] == one[:2]
    # One token of the merged dataset's second train shard changed.
    name = "shard_00001.npy" if fmt == "tokens" else "shard_00001/tokens.bin"
    path = tmp_path / "m" / "train" / name
    data = bytearray(path.read_bytes())
    data[-2] ^= 1
    path.write_bytes(bytes(data))
    report = tokenfeed.inspect(tmp_path / "m", deep=True)["splits"]["train"]
    assert report["layout_free_fingerprint"] != one[0] and report["deep"]["content_sha256"] != one[1]


def test_the_python_doors_prepare_a_task_and_merge(tmp_path, monkeypatch):
    write_corpus(tmp_path / "in", {"a.jsonl": 400, "b.jsonl": 900}, seed=2)
    inputs = [str(tmp_path / "in" / "*.jsonl")]
    tokenfeed.prepare_text(inputs, tmp_path / "one", val_split=0.1, shard_tokens=5000)
    for k in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    s = tokenfeed.prepare_text(inputs, tmp_path / "m", val_split=0.1, shard_tokens=5000, task="auto", num_tasks=2)
    assert s["written"] == str(tmp_path / "m" / "parts" / "1")
    with pytest.raises(tokenfeed.ConfigError, match="task 0 missing"):
        tokenfeed.merge_text_parts(tmp_path / "m")
    with pytest.raises(tokenfeed.ConfigError, match="not below num_tasks"):
        tokenfeed.prepare_text(inputs, tmp_path / "m", task=2, num_tasks=2)
    tokenfeed.prepare_text(inputs, tmp_path / "m", val_split=0.1, shard_tokens=5000, task=0, num_tasks=2)
    merged = tokenfeed.merge_text_parts(tmp_path / "m")
    one = json.loads((tmp_path / "one" / "dataset_metadata.json").read_text())
    assert merged["train"]["documents"] == one["splits"]["train"]["documents"] and merged["written"] == str(
        tmp_path / "m")
    assert_same_dataset(tmp_path / "one", tmp_path / "m")


def test_ray_runs_the_tasks_retries_a_killed_one_from_its_shards_and_merges(tmp_path):
    try:
        import ray
    except ImportError as e:  # only when ray is not importable
        pytest.skip(f"ray is not importable here ({e}): python/run_tests.sh installs it from PyPI")
    import tokenfeed.ray

    write_corpus(tmp_path / "in", {"a.jsonl": 3000, "big.jsonl": 40000, "c.jsonl": 2000}, seed=3)
    inputs = [str(tmp_path / "in" / "*.jsonl")]
    options = {"val_split": 0.05, "shard_tokens": 100000, "workers": 1}
    tokenfeed.prepare_text(inputs, tmp_path / "one", **options)
    out = tmp_path / "ray"
    marker = tmp_path / "killed-once"

    def die_once_after_a_shard(bar, line, done):
        """Kills its own worker (SIGKILL) once, in the first task that has finished a shard."""
        mine = list((out / "parts").glob(f".*.tmp-{os.getpid()}-*/prepare_text_shards.jsonl"))
        if done or not mine or mine[0].stat().st_size == 0:
            return
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, mine[0].parent.name.encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        summary = tokenfeed.ray.prepare_text(inputs, out, num_tasks=3, max_part_bytes=1_500_000, max_retries=2,
                                             progress=die_once_after_a_shard, progress_seconds=0.0, **options)
    finally:
        ray.shutdown()
    assert marker.exists(), "no task was killed: the corpus is too small for a shard before the end"
    killed = int(marker.read_text().split(".")[1])
    task = summary["tasks"][killed]
    assert task["task"] == killed and task["resumed"] and task["shards_reused"] > 0
    assert [t["task"] for t in summary["tasks"]] == [0, 1, 2]
    assert_same_dataset(tmp_path / "one", out)
