"""C++ errors arrive as tokenfeed.Error subclasses that are also the natural built-in
exception (ValueError for config/state/usage, OSError for files), with the C++ message."""
import os

import numpy as np
import pytest

import tokenfeed
from conftest import base_keys, write_config


def test_hierarchy():
    for cls, builtin, kind in [(tokenfeed.ConfigError, ValueError, "config"), (tokenfeed.StateError, ValueError, "state"),
                               (tokenfeed.UsageError, ValueError, "usage"), (tokenfeed.IoError, OSError, "io"),
                               (tokenfeed.FormatError, OSError, "format"),
                               (tokenfeed.PipelineError, RuntimeError, "pipeline")]:
        assert issubclass(cls, tokenfeed.Error) and issubclass(cls, builtin)
        assert cls.kind == kind
        assert cls.__module__ == "tokenfeed"


def test_bad_key_is_a_value_error(sft_dir):
    with pytest.raises(ValueError, match="unknown config key 'bacth_size'") as e:
        tokenfeed.Loader(base_keys(sft_dir, bacth_size=4))
    assert type(e.value) is tokenfeed.ConfigError


def test_bad_values(sft_dir, tmp_path):
    with pytest.raises(tokenfeed.ConfigError, match="batch_size"):
        tokenfeed.Loader(base_keys(sft_dir, batch_size="many"))
    with pytest.raises(tokenfeed.ConfigError, match="batch_size"):
        tokenfeed.Loader(base_keys(sft_dir, batch_size=0))
    with pytest.raises(tokenfeed.ConfigError, match="unsupported value"):
        tokenfeed.Loader(base_keys(sft_dir, batch_size=[4]))
    with pytest.raises(tokenfeed.ConfigError, match="dataset_dir"):
        tokenfeed.Loader({"batch_size": 4, "block_size": 8})
    xml = tmp_path / "bad.xml"
    xml.write_text("<training><batch_size>4</batch_size")
    with pytest.raises(tokenfeed.ConfigError):
        tokenfeed.Loader(xml)
    with pytest.raises(TypeError):
        tokenfeed.Loader(42)


def test_missing_dataset_is_an_os_error(tmp_path):
    with pytest.raises(OSError, match="does not exist") as e:
        tokenfeed.Loader(base_keys(tmp_path / "nowhere"))
    assert type(e.value) is tokenfeed.IoError
    with pytest.raises(tokenfeed.IoError):
        tokenfeed.Loader(tmp_path / "missing.xml")


def test_invalid_dataset_is_a_format_error(sft_dir, tmp_path):
    # A copy of the dataset whose index is cut in the middle of a record.
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(sft_dir, broken)
    idx = broken / "train" / "shard_00000" / "episodes.idx"
    idx.write_bytes(idx.read_bytes()[:-3])
    with pytest.raises(OSError, match="episodes.idx") as e:
        tokenfeed.Loader(base_keys(broken))
    assert type(e.value) is tokenfeed.FormatError


def test_a_symbolic_link_loop_is_an_io_error_naming_it(sft_dir, tmp_path):
    """std::filesystem's own exceptions (a RuntimeError) never reach Python: the loader,
    inspect, the preparations and the writer raise IoError naming the path."""
    import shutil

    looped = tmp_path / "looped"
    shutil.copytree(sft_dir, looped)
    os.symlink("loop", looped / "train" / "loop")
    match = r"cannot access '.*loop': Too many levels of symbolic links"
    with pytest.raises(tokenfeed.IoError, match=match):
        tokenfeed.Loader(base_keys(looped))
    with pytest.raises(tokenfeed.IoError, match=match):
        tokenfeed.inspect(looped)
    os.symlink("out_loop", tmp_path / "out_loop")
    (tmp_path / "t.jsonl").write_text('{"text": "hello"}\n')
    with pytest.raises(tokenfeed.IoError, match="out_loop"):
        tokenfeed.prepare_text(tmp_path / "t.jsonl", tmp_path / "out_loop" / "p")
    with pytest.raises(tokenfeed.IoError, match="out_loop"):
        tokenfeed.DatasetWriter(tmp_path / "out_loop" / "train", token_dtype="uint16")


def test_usage_errors(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    with pytest.raises(tokenfeed.UsageError):
        loader.get_batch("test")
    with pytest.raises(ValueError):
        loader.stats("nope")
    loader.close()
    loader.close()  # idempotent
    with pytest.raises(tokenfeed.UsageError, match="closed"):
        loader.state_dict()


def test_relative_dataset_dir_in_a_dict_resolves_against_the_cwd(sft_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(sft_dir.parent)
    loader = tokenfeed.Loader(base_keys(os.path.basename(sft_dir)))
    assert loader.config["dataset_dir"] == str(sft_dir)
    # An XML file's relative dataset_dir resolves against the file's directory instead.
    sub = tmp_path / "configs"
    sub.mkdir()
    xml = write_config(sub / "c.xml", **base_keys(os.path.relpath(sft_dir, sub)))
    monkeypatch.chdir("/")
    assert tokenfeed.Loader(xml).config["dataset_dir"] == str(sft_dir)


def test_overrides(sft_dir, tmp_path):
    xml = write_config(tmp_path / "c.xml", **base_keys(sft_dir))
    loader = tokenfeed.Loader(xml, block_size=np.int64(32), use_loss_mask=True, pad_token_id=None, epoch_seed=7.0)
    assert loader.get_batch().x.shape == (4, 32)
    assert loader.config["epoch_seed"] == "7"
    assert repr(loader).startswith("Loader(dataset_dir=") and "block_size=32" in repr(loader)
    assert loader.get_batch().mask.shape == (4, 32)


def test_writer_errors(tmp_path):
    w = tokenfeed.DatasetWriter(tmp_path / "train", token_dtype="uint16")
    with pytest.raises(tokenfeed.UsageError, match="mask is required"):
        w.add([1, 2, 3])
    with pytest.raises(tokenfeed.UsageError, match="mask has 2 values for 3 tokens"):
        w.add([1, 2, 3], [1, 0])
    with pytest.raises(tokenfeed.UsageError, match="0/1"):
        w.add([1, 2, 3], [1, 0, 2])
    with pytest.raises(tokenfeed.UsageError, match="token ids"):
        w.add([1, -2, 3], [1, 0, 1])
    with pytest.raises(tokenfeed.FormatError):
        w.add([1, 70000, 3], [1, 0, 1])  # does not fit uint16
    with pytest.raises(tokenfeed.UsageError, match="add up to"):
        w.add_many(np.arange(10), [3, 3], np.ones(10, dtype=bool))
    with pytest.raises(tokenfeed.ConfigError, match="token_dtype"):
        tokenfeed.DatasetWriter(tmp_path / "x", token_dtype="int8")
    w.finish()
    with pytest.raises(tokenfeed.UsageError, match="after finish"):
        w.add([1, 2], [0, 1])


def test_a_worker_stage_error_raises_from_get_batch(sft_dir, tmp_path):
    """A dataset file cut short under a running loader: the decode stage's error (not a crash
    from SIGBUS) reaches get_batch as an IoError carrying the C++ message, and again after."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(sft_dir, data)
    loader = tokenfeed.Loader(base_keys(data, prefetch_depth=1, decode_threads=1))
    loader.get_batch()
    for tokens in (data / "train").rglob("tokens.bin"):
        os.truncate(tokens, 0)
    with pytest.raises(tokenfeed.IoError, match="tokens.bin' became shorter than when it was opened") as e:
        for _ in range(200):
            loader.get_batch()
    assert isinstance(e.value, OSError)
    with pytest.raises(tokenfeed.IoError):
        loader.get_batch()
