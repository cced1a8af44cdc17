"""tokenfeed.inspect(): the library's dataset inspection as a dict, with the figures
`tokenfeed inspect` prints (the command formats the same report), for a directory or a
config; a corrupt dataset reported, not raised."""
import re
import shutil
import subprocess

import pytest

import tokenfeed
from conftest import base_keys, run_cli, write_config, write_sft_dataset


def cli_lines(cli, *args):
    """`tokenfeed inspect ARGS`: its exit status, and each split's lines by their label."""
    r = subprocess.run([cli, "inspect", *map(str, args)], capture_output=True, text=True)
    splits, current = {}, None
    for line in r.stdout.splitlines():
        m = re.match(r"split (\w+) \(", line)
        if m:
            current = splits.setdefault(m.group(1), {})
        elif current is not None and line.startswith("  "):
            label, _, rest = line.strip().partition(" ")
            current.setdefault(label, []).append(rest.strip())
    return r.returncode, splits, r.stdout


def numbers(text):
    return [int(n) for n in re.findall(r"\d+", text)]


def percentile_numbers(lengths):
    """The numbers of a "min A, median B, p90 C, p99 D, max E" line for these percentiles."""
    return [lengths["min"], lengths["median"], 90, lengths["p90"], 99, lengths["p99"], lengths["max"]]


def test_episode_figures_match_the_command(sft_dir, cli):
    report = tokenfeed.inspect(sft_dir)
    status, lines, _ = cli_lines(cli, sft_dir)
    assert status == 0 and report["valid"] and report["error"] is None
    assert report["layout"] == "episodes" and report["metadata"] and set(report["splits"]) == {"train", "val"}
    for name, split in report["splits"].items():
        got = lines[name]
        assert split["verdict"] == got["verdict"][0] == "ok"
        assert numbers(got["layout"][0]) == [split["shards"]] and split["layout"] == "sharded"
        assert numbers(got["episodes"][0]) == [split["episodes"], split["kept_episodes"], split["min_tokens"]]
        assert got["tokens"][0] == f"{split['tokens']}, dtype {split['token_dtype']} (from dataset_metadata.json)"
        assert split["token_dtype_source"] == "dataset_metadata.json" and got["mask"][0] == split["mask"] == "uint8"
        assert numbers(got["lengths"][0]) == percentile_numbers(split["lengths"])
        assert split["block"] is None and split["deep"] is None
    assert report["splits"]["train"]["episodes"] == 300 and report["splits"]["val"]["episodes"] == 40
    # The --print-config snippet's keys.
    assert report["config"]["dataset_mode"] == "sft_episode" and report["config"]["batch_size"] == "8"


def test_a_config_gives_the_run_it_describes(sft_dir, tmp_path, cli):
    # block_size and sft_packed's settings from the config, as --block-size and --packed.
    keys = base_keys(sft_dir, dataset_mode="sft_packed", truncation="split", pack_lookahead=16, epoch_seed=7)
    xml = write_config(tmp_path / "packed.xml", **keys)
    for source in (keys, xml):
        report = tokenfeed.inspect(source)
        train = report["splits"]["train"]
        _, lines, _ = cli_lines(cli, sft_dir, "--block-size", 64, "--packed", "--truncation", "split",
                                "--pack-lookahead", 16, "--seed", 7)
        got = lines["train"]
        block = train["block"]
        assert block["block_size"] == 64 and numbers(got["block"][0])[:2] == [64, block["longer"]]
        right = block["truncation"]["right"]
        assert got["truncation"][0] == (f"right             {right['dropped_tokens']} tokens dropped, "
                                        f"{right['lost_trained_tokens']} trained tokens lost")
        packing = block["packing"]
        assert numbers(got["packing"][0])[:3] == [packing["packed_rows"], packing["packed_positions"],
                                                  packing["packed_cells"]]
        cut = packing["split"]
        assert numbers(got["split"][0])[:2] == [cut["cut"], cut["documents"]] and cut["pieces"] > cut["documents"]
        assert report["config"]["truncation"] == "split" and report["config"]["epoch_seed"] == "7"


def test_token_stream_figures_match_the_command(stream_dir, cli):
    report = tokenfeed.inspect(str(stream_dir), deep=True)
    status, lines, _ = cli_lines(cli, stream_dir, "--deep")
    assert status == 0 and report["valid"] and report["layout"] == "token_stream"
    for name, split in report["splits"].items():
        got = lines[name]
        assert split["layout"] == "flat" and [f["name"] for f in split["files"]] == [f"{name}.bin"]
        assert numbers(got["tokens"][0]) == [split["tokens"]]
        docs = split["documents"]
        assert numbers(got["documents"][0])[:2] == [docs["count"], docs["eos_token_id"]]
        assert numbers(got["doc"][0]) == percentile_numbers(docs["lengths"])
        # Flat .bin files record no checksums; vocab_size is not recorded either.
        assert split["deep"]["vocab"] is None and split["deep"]["checksums"] is None
        assert got["deep"] == ["token ids not checked: dataset_metadata.json has no vocab_size"]
    assert report["config"]["dataset_mode"] == "token_stream" and report["config"]["document_aware"] == "true"


def test_a_flipped_byte_is_reported_under_deep(tmp_path, cli):
    write_sft_dataset(tmp_path, episodes=60, seed=3, shard_tokens=4000, val_episodes=0)
    clean = tokenfeed.inspect(tmp_path, deep=True)
    deep = clean["splits"]["train"]["deep"]
    assert clean["valid"] and deep["checksums"]["recorded"] and deep["checksums"]["problems"] == []
    assert deep["vocab"]["out_of_vocab"] == 0 and deep["mask_values"]["out_of_range"] == 0
    assert deep["checksums"]["shards"] == clean["splits"]["train"]["shards"] > 1

    shard = sorted((tmp_path / "train").iterdir())[1]
    tokens = shard / "tokens.bin"
    data = bytearray(tokens.read_bytes())
    data[2] ^= 1
    tokens.write_bytes(bytes(data))
    # Without deep, the content is not read: nothing to see.
    assert tokenfeed.inspect(tmp_path)["valid"]
    report = tokenfeed.inspect(tmp_path, deep=True)
    train = report["splits"]["train"]
    assert not report["valid"] and not train["valid"]
    assert report["error"]["kind"] == "format" and "content checksums" in report["error"]["message"]
    assert train["verdict"] == "INVALID: content checksum mismatch"
    problems = train["deep"]["checksums"]["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"train/{shard.name}/tokens.bin differs")
    # The command reports the same mismatch, and fails with the same error.
    status, lines, _ = cli_lines(cli, tmp_path, "--deep")
    assert status == 4 and lines["train"]["verdict"] == [train["verdict"]]
    assert lines["train"]["deep"][-1] == f"content checksums: 1 mismatch: {problems[0]}"


def test_a_refused_dataset_is_reported_and_bad_requests_raise(sft_dir, tmp_path):
    shutil.copytree(sft_dir / "val", tmp_path / "val")
    shutil.copy(sft_dir / "dataset_metadata.json", tmp_path)
    report = tokenfeed.inspect(tmp_path)  # val only: the loader needs train
    assert not report["valid"] and report["missing_train"].startswith("no train split")
    assert report["error"]["kind"] == "io" and report["splits"]["val"]["valid"] and report["config"] == {}
    with pytest.raises(tokenfeed.IoError, match="does not exist"):
        tokenfeed.inspect(tmp_path / "missing")
    with pytest.raises(tokenfeed.UsageError, match="mixture"):
        tokenfeed.inspect({"mixture": [{"name": "a", "weight": 1, "dataset_dir": str(sft_dir)}]})
    with pytest.raises(tokenfeed.UsageError, match="--packed needs --block-size"):
        tokenfeed.inspect({"dataset_dir": str(sft_dir), "dataset_mode": "sft_packed"})
