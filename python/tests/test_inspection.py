"""tokenfeed.inspect(): the library's dataset inspection as a dict, with the figures
`tokenfeed inspect` prints (the command formats the same report), for a directory or a
config; a corrupt dataset reported, not raised."""
import re
import shutil
import subprocess
from pathlib import Path

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
        # The content identity, whatever the files: its fingerprint, and deep its SHA-256.
        assert got["content"][0].split()[0] == split["layout_free_fingerprint"]
        assert got["sha256"][0].split()[0] == split["deep"]["content_sha256"]
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
    with pytest.raises(tokenfeed.UsageError, match="mixture; give steps=N"):
        tokenfeed.inspect({"mixture": [{"name": "a", "weight": 1, "dataset_dir": str(sft_dir)}]})
    with pytest.raises(tokenfeed.UsageError, match="--packed needs --block-size"):
        tokenfeed.inspect({"dataset_dir": str(sft_dir), "dataset_mode": "sft_packed"})


def mixture_command_lines(cli, config, steps):
    """`tokenfeed inspect --config CONFIG --steps STEPS`: its report's lines (not the loader's)."""
    r = subprocess.run([cli, "inspect", "--config", str(config), "--steps", str(steps)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if not line.startswith("[tokenfeed]")]


def mixture_report_lines(config, report):
    """The command's lines, as its format (tools/cmd_inspect_mixture.cpp) prints `report`."""
    steps = report["steps"]
    lines = [f"mixture {config}: {len(report['sources'])} sources, {len(report['stages'])} stages; the first "
             f"{steps} steps of rank {report['rank']} ({report['batch_size']} x {report['block_size']} per batch)"]
    sizes = report["weights_from_sizes"]
    if sizes is not None:
        planned = "" if sizes["planned_steps"] is None else f", planned_steps {sizes['planned_steps']}"
        lines.append(f"weights from dataset sizes: temperature {sizes['temperature']:g}{planned}")
        lines.append(f"  {'source':<16} {'tokens':>14} {'rows/epoch':>12} {'weight':>10} {'capped':>6} "
                     f"{'epochs_planned':>14} {'epochs_steps':>14}")
        for name, w in sizes["sources"].items():
            planned, in_steps = ("-" if e is None else f"{e:.3f}" for e in (w["epochs_planned"], w["epochs_steps"]))
            lines.append(f"  {name:<16} {w['tokens']:>14} {w['rows_per_epoch']:>12} {w['weight']:>10} "
                         f"{'yes' if w['capped'] else 'no':>6} {planned:>14} {in_steps:>14}")
    for s, stage in enumerate(report["stages"]):
        if stage["last_step"] is None:
            lines.append(f"stage {s}  from step {stage['first_step']}: not reached in {steps} steps")
            continue
        lines.append(f"stage {s}  steps {stage['first_step']}..{stage['last_step']}")
        lines.append(f"  {'source':<16} {'rows':>10} {'share':>7} {'real_tokens':>14} {'share':>7} "
                     f"{'trained_tokens':>14} {'share':>7}")
        for name in report["sources"]:
            c = stage["sources"][name]
            lines.append(f"  {name:<16} {c['rows']:>10} {c['row_share']:6.2f}% {c['real_tokens']:>14} "
                         f"{c['real_share']:6.2f}% {c['trained_tokens']:>14} {c['trained_share']:6.2f}%")
    lines.append(f"epochs after {steps} steps (all ranks):")
    for name in report["sources"]:
        epoch = report["epochs"][name]
        lines.append(f"  {name:<16} random sampling: no epochs" if epoch is None else
                     f"  {name:<16} epoch {epoch} ({epoch + 1} epochs begun)")
    return lines


def mixture_xml(path, sources, stages="", attributes=""):
    Path(path).write_text("<training><batch_size>4</batch_size><block_size>64</block_size>"
                          f"<audit_log_dir></audit_log_dir><mixture{attributes}>{sources}{stages}</mixture></training>")
    return str(path)


def test_a_mixture_report_matches_the_command(sft_dir, stream_dir, tmp_path, cli):
    sources = (f'<source name="chat" dataset_dir="{sft_dir}" weight="3"/>'
               f'<source name="web" dataset_dir="{stream_dir}" weight="1" dataset_mode="token_stream"/>')
    stages = ('<stage until_step="5"/><stage until_step="9"><weight source="chat">1</weight></stage>'
              '<stage until_step="40"><weight source="web">0</weight></stage><stage/>')
    config = mixture_xml(tmp_path / "mix.xml", sources, stages)
    report = tokenfeed.inspect(config, steps=12)
    assert mixture_command_lines(cli, config, 12) == mixture_report_lines(config, report)
    assert report["sources"] == ["chat", "web"] and report["steps"] == 12 and report["rank"] == 0
    first = [(stage["first_step"], stage["last_step"]) for stage in report["stages"]]
    assert first == [(0, 4), (5, 8), (9, 11), (40, None)] and report["stages"][3]["sources"] == {}
    # 3:1 over stage 0's 20 rows, 1:1 over stage 1's 16, chat alone after.
    rows = [{name: c["rows"] for name, c in stage["sources"].items()} for stage in report["stages"][:3]]
    assert rows == [{"chat": 15, "web": 5}, {"chat": 8, "web": 8}, {"chat": 12, "web": 0}]
    assert report["weights_from_sizes"] is None and report["epochs"]["web"] is None
    assert report["epochs"]["chat"] == 0  # 35 rows of an epoch of some 300 episodes
    # The same mixture from a mapping: the same report.
    keys = dict(batch_size=4, block_size=64, audit_log_dir="",
                mixture=[dict(name="chat", dataset_dir=str(sft_dir), weight=3),
                         dict(name="web", dataset_dir=str(stream_dir), weight=1, dataset_mode="token_stream")],
                stages=[dict(until_step=5), dict(until_step=9, weights={"chat": 1}),
                        dict(until_step=40, weights={"web": 0}), dict()])
    assert tokenfeed.inspect(keys, steps=12) == report


def test_a_mixture_report_of_weights_from_sizes_matches_the_command(sft_dir, stream_dir, tmp_path, cli):
    sources = (f'<source name="chat" dataset_dir="{sft_dir}" weight="auto" max_epochs="0.05"/>'
               f'<source name="code" dataset_dir="{sft_dir}" weight="auto" epoch_seed="9"/>')
    config = mixture_xml(tmp_path / "sized.xml", sources, attributes=' temperature="0.5" planned_steps="100"')
    report = tokenfeed.inspect(config, steps=7)
    assert mixture_command_lines(cli, config, 7) == mixture_report_lines(config, report)
    sizes = report["weights_from_sizes"]
    assert sizes["temperature"] == 0.5 and sizes["planned_steps"] == 100
    chat, code = sizes["sources"]["chat"], sizes["sources"]["code"]
    assert chat["capped"] and not code["capped"] and chat["tokens"] == code["tokens"]
    assert chat["epochs_planned"] == pytest.approx(0.05, abs=1e-3)
    assert chat["epochs_steps"] == pytest.approx(7 * 4 * float(chat["weight"]) / chat["rows_per_epoch"])


def test_a_mixture_report_refuses_what_it_cannot_describe(sft_dir, tmp_path):
    keys = dict(batch_size=4, block_size=64, audit_log_dir="",
                mixture=[dict(name="chat", dataset_dir=str(sft_dir), weight=1)])
    for steps in (0, 10_000_001):
        with pytest.raises(tokenfeed.UsageError, match=rf"inspect: steps {steps}: must be in \[1, 10000000\]"):
            tokenfeed.inspect(keys, steps=steps)
    with pytest.raises(tokenfeed.UsageError, match="mixture; give steps=N"):
        tokenfeed.inspect(keys)
    with pytest.raises(tokenfeed.UsageError, match="deep"):
        tokenfeed.inspect(keys, deep=True, steps=3)
    with pytest.raises(tokenfeed.UsageError, match="the config has no mixture"):
        tokenfeed.inspect(base_keys(sft_dir), steps=3)
    with pytest.raises(tokenfeed.UsageError, match="is a dataset directory"):
        tokenfeed.inspect(sft_dir, steps=3)
    with pytest.raises(tokenfeed.ConfigError, match="mixture source 'chat'.*batch_size"):
        tokenfeed.inspect(dict(keys, mixture=[dict(keys["mixture"][0], batch_size=2)]), steps=3)


def write_megatron_pair(prefix, documents):
    """NAME.bin + NAME.idx (Megatron MMIDIDX, version 1, uint16 code 8), one sequence a
    document, from the published format (docs/formats.md, "Megatron indexed datasets")."""
    import numpy as np

    lengths = np.array([len(d) for d in documents], dtype="<i4")
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1], dtype="<i8") * 2]).astype("<i8")
    header = b"MMIDIDX\x00\x00" + np.array([1], "<u8").tobytes() + bytes([8])
    header += np.array([len(documents), len(documents) + 1], "<u8").tobytes()
    body = lengths.tobytes() + pointers.tobytes() + np.arange(len(documents) + 1, dtype="<i8").tobytes()
    Path(str(prefix) + ".idx").write_bytes(header + body)
    Path(str(prefix) + ".bin").write_bytes(np.concatenate(documents).astype("<u2").tobytes())


def test_a_config_with_val_fraction_splits_megatron_documents(tmp_path, cli):
    import numpy as np

    rng = np.random.default_rng(5)
    documents = [rng.integers(2, 1000, size=int(rng.integers(3, 40))) for _ in range(120)]
    (tmp_path / "train").mkdir()
    write_megatron_pair(tmp_path / "train" / "a_text_document", documents)
    keys = base_keys(tmp_path, dataset_mode="sft_packed", block_size=16, batch_size=2, pad_token_id=0,
                     val_fraction="0.25", val_seed=3, truncation="split")
    report = tokenfeed.inspect(keys)
    assert report["valid"] and report["layout"] == "episodes", report
    train, val = report["splits"]["train"], report["splits"]["val"]
    # Every document an episode of one split (none is empty), every token in one of them.
    assert train["episodes"] + val["episodes"] == 120 and min(train["episodes"], val["episodes"]) > 10
    assert train["tokens"] + val["tokens"] == sum(len(d) for d in documents)
    assert train["block"]["packing"]["packed_rows"] > 0
    assert report["config"]["val_fraction"] == "0.25" and report["config"]["val_seed"] == "3"
    # The command's --val-fraction reads the same split; the token stream's documents are those.
    status, lines, _ = cli_lines(cli, tmp_path, "--block-size", 16, "--val-fraction", 0.25, "--val-seed", 3)
    assert status == 0
    chosen = [int(re.search(r"this split is (\d+) documents", lines[s]["val_fraction"][0]).group(1))
              for s in ("train", "val")]
    assert chosen == [train["episodes"], val["episodes"]]
    stream = tokenfeed.inspect({**keys, "dataset_mode": "token_stream"})
    assert [stream["splits"][s]["val_fraction"]["documents"] for s in ("train", "val")] == [
        train["episodes"], val["episodes"]]
    # A loader over the config reads both splits; its val episodes are inspect's.
    loader = tokenfeed.Loader(keys)
    assert loader.info("val")["episodes"] == val["episodes"]
    loader.get_batch("val")
