"""Mixtures from Python: the dict config's `mixture` and `stages`, batch.source_ids,
loader.source_names, each source's rows equal to its own stream, and exact resume."""
import numpy as np
import pytest

import tokenfeed


def mixture_keys(sft_dir, stream_dir, **extra):
    keys = dict(batch_size=4, block_size=64, audit_log_dir="", prefetch_depth=2, decode_threads=1,
                mixture=[dict(name="chat", dataset_dir=str(sft_dir), weight=3),
                         dict(name="web", dataset_dir=str(stream_dir), weight=0.5, dataset_mode="token_stream",
                              document_aware=True)],
                stages=[dict(until_step=5), dict(weights={"chat": 1, "web": 1.5})])
    keys.update(extra)
    return keys


def rows_by_source(loader, steps):
    out = {0: [], 1: []}
    for b in loader.iter(steps=steps):
        ids = b.source_ids
        assert ids.dtype == np.int32 and ids.shape == (b.rows,)
        for r, s in enumerate(ids):
            out[int(s)].append((b.tokens[r].copy(), b.labels[r].copy(), b.token_weights[r].copy(),
                                int(b.episode_ids[r])))
    return out


def test_source_names_ids_and_single_streams(sft_dir, stream_dir):
    keys = mixture_keys(sft_dir, stream_dir)
    loader = tokenfeed.Loader(keys)
    assert loader.source_names == ["chat", "web"]
    rows = rows_by_source(loader, 10)
    # 3 : 0.5 = 6:1 over the first 20 rows (the period chat chat chat web chat chat chat,
    # twice, then its first 6), then 1 : 1.5 = 2:3 over the next 20.
    assert len(rows[0]) == 17 + 8 and len(rows[1]) == 3 + 12
    singles = [dict(dataset_dir=str(sft_dir)),
               dict(dataset_dir=str(stream_dir), dataset_mode="token_stream", document_aware=True)]
    for s, extra in enumerate(singles):
        alone = tokenfeed.Loader(dict(batch_size=1, block_size=64, audit_log_dir="", decode_threads=1, **extra))
        for (tokens, labels, weights, episode), b in zip(rows[s], alone.iter(steps=len(rows[s]))):
            np.testing.assert_array_equal(tokens, b.tokens[0])
            np.testing.assert_array_equal(labels, b.labels[0])
            np.testing.assert_array_equal(weights, b.token_weights[0])
            assert episode == int(b.episode_ids[0])


def test_resume_across_a_stage(sft_dir, stream_dir):
    keys = mixture_keys(sft_dir, stream_dir)
    whole = [b.source_ids.copy() for b in tokenfeed.Loader(keys).iter(steps=9)]
    first = tokenfeed.Loader(keys)
    for _ in first.iter(steps=4):
        pass
    state = first.state_dict()
    again = tokenfeed.Loader(keys)
    again.load_state_dict(state)
    rest = [b.source_ids.copy() for b in again.iter(steps=5)]
    for a, b in zip(whole[4:], rest):
        np.testing.assert_array_equal(a, b)


def test_single_dataset_has_no_sources(sft_dir):
    loader = tokenfeed.Loader(dict(dataset_dir=str(sft_dir), batch_size=2, block_size=32, audit_log_dir=""))
    assert loader.source_names == []
    assert loader.get_batch().source_ids.size == 0


def test_bad_mixture_configs(sft_dir, stream_dir):
    with pytest.raises(tokenfeed.ConfigError, match="mixture source 'chat'.*batch_size"):
        tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, mixture=[dict(name="chat", dataset_dir=str(sft_dir),
                                                                         weight=1, batch_size=2)], stages=None))
    with pytest.raises(tokenfeed.ConfigError, match="weight"):
        tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, mixture=[dict(name="chat", dataset_dir=str(sft_dir))],
                                      stages=None))
    with pytest.raises(tokenfeed.ConfigError, match="names source 'code'"):
        tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, stages=[dict(weights={"code": 1})]))


def test_until_step_that_is_not_a_number(sft_dir, stream_dir):
    # A stage's until_step goes through the config parser's own integer check, as the XML's
    # <stage until_step="N"> does: ConfigError naming the key, never a bare C++ exception
    # (std::invalid_argument, std::out_of_range) escaping as ValueError.
    for bad in ("soon", "5 steps", "99999999999999999999", ""):
        with pytest.raises(tokenfeed.ConfigError,
                           match=f"mixture stage 0: config key 'until_step': expected an integer, got '{bad}'"):
            tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, stages=[dict(until_step=bad),
                                                                        dict(weights={"chat": 1, "web": 1})]))
    loader = tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, stages=[dict(until_step=" 5 "),
                                                                         dict(weights={"chat": 1, "web": 1})]))
    assert loader.get_batch().source_ids.size == 4


def _xml_attributes(record):
    return "".join(f' {k}="{v}"' for k, v in record.items())


@pytest.mark.parametrize("mistake", ["stage key", "until_step", "no name", "no weight", "max_epochs", "weights' source"])
def test_a_mistake_reads_the_same_from_a_dict_and_from_xml(sft_dir, stream_dir, tmp_path, mistake):
    # One schema reads both doors (src/config/mixture_schema): the dict's error is the XML
    # file's, which only adds the file's name in front.
    chat = dict(name="chat", dataset_dir=str(sft_dir), weight="3")
    sources, stages = [chat], [dict(until_step="5"), dict(weights={"chat": "1"})]
    if mistake == "stage key":
        stages[0]["until"] = "7"
    elif mistake == "until_step":
        stages[0]["until_step"] = "soon"
    elif mistake == "no name":
        sources.append(dict(dataset_dir=str(stream_dir), weight="1"))
    elif mistake == "no weight":
        del chat["weight"]
    elif mistake == "max_epochs":
        chat["max_epochs"] = "two"
    else:
        stages[1]["weights"] = {"code": "1"}
    xml = ("<training><batch_size>4</batch_size><block_size>64</block_size><audit_log_dir></audit_log_dir><mixture>"
           + "".join(f"<source{_xml_attributes(s)}/>" for s in sources)
           + "".join(f"<stage{_xml_attributes({k: v for k, v in s.items() if k != 'weights'})}>"
                     + "".join(f'<weight source="{n}">{w}</weight>' for n, w in s.get("weights", {}).items())
                     + "</stage>" for s in stages)
           + "</mixture></training>")
    path = tmp_path / "mix.xml"
    path.write_text(xml)
    with pytest.raises(tokenfeed.ConfigError) as from_dict:
        tokenfeed.Loader(dict(batch_size=4, block_size=64, audit_log_dir="", mixture=sources, stages=stages))
    with pytest.raises(tokenfeed.ConfigError) as from_xml:
        tokenfeed.Loader(str(path))
    message = str(from_dict.value)
    assert message.startswith(("mixture source", "mixture stage")), message
    assert str(from_xml.value) in (message, f"{path}: {message}")


class _TaggedFloat(float):
    """A float subclass whose repr is not its decimal, as numpy 2's float64 ("np.float64(0.5)")."""

    def __repr__(self):
        return f"tagged({float(self)!r})"


def test_float_subclass_weights_are_read_by_their_value(sft_dir, stream_dir):
    plain = mixture_keys(sft_dir, stream_dir)
    tagged = mixture_keys(sft_dir, stream_dir)
    tagged["mixture"][1]["weight"] = _TaggedFloat(0.5)
    tagged["stages"][1]["weights"]["web"] = _TaggedFloat(1.5)
    tagged["stages"][1]["weights"]["chat"] = np.float64(1)
    expected = [b.source_ids.copy() for b in tokenfeed.Loader(plain).iter(steps=10)]
    got = [b.source_ids.copy() for b in tokenfeed.Loader(tagged).iter(steps=10)]
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)
