"""Weights from dataset sizes from a Python mapping config: mixture_temperature,
mixture_planned_steps and a source's max_epochs, against the rule of docs/mixtures.md
computed here, and errors that name the source or key."""
import numpy as np
import pytest

import tokenfeed


def sources(sft_dir, stream_dir, weight="auto", **chat):
    return [dict(name="chat", dataset_dir=str(sft_dir), weight=weight, **chat),
            dict(name="web", dataset_dir=str(stream_dir), weight=weight, dataset_mode="token_stream")]


def keys(mixture, **extra):
    out = dict(batch_size=4, block_size=64, audit_log_dir="", prefetch_depth=2, decode_threads=1, mixture=mixture)
    out.update(extra)
    return out


def figures(source):
    """(tokens, rows of an epoch) of a source's train split, from the source alone."""
    alone = {k: v for k, v in source.items() if k not in ("name", "weight", "max_epochs")}
    info = tokenfeed.Loader(dict(batch_size=1, block_size=64, audit_log_dir="", decode_threads=1, **alone)).info()
    return info["tokens"], info["batches_per_epoch"]


def rounded(shares):
    """Shares in millionths by largest remainder (ties to the earlier), as 6-decimal texts."""
    exact = [s * 10**6 for s in shares]
    units = [int(np.floor(e)) for e in exact]
    order = sorted(range(len(units)), key=lambda i: (-(exact[i] - units[i]), i))
    for k in range(10**6 - sum(units)):
        units[order[k % len(order)]] += 1
    return [f"{u // 10**6}.{u % 10**6:06d}" for u in units]


def weights(loader):
    return [entry.split(":")[1] for entry in loader.config["mixture"].split()]


def source_ids(loader, steps):
    return np.concatenate([b.source_ids.copy() for b in loader.iter(steps=steps)])


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_temperature_weights_equal_the_written_ones(sft_dir, stream_dir, alpha):
    mixture = sources(sft_dir, stream_dir)
    tokens = [figures(s)[0] for s in mixture]
    raw = [float(n) ** alpha for n in tokens]
    expected = rounded([r / sum(raw) for r in raw])
    loader = tokenfeed.Loader(keys(mixture, mixture_temperature=alpha))
    assert weights(loader) == expected
    assert "mixture_temperature" not in loader.config
    explicit = [dict(s, weight=w) for s, w in zip(sources(sft_dir, stream_dir), expected)]
    np.testing.assert_array_equal(source_ids(loader, 20),
                                  source_ids(tokenfeed.Loader(keys(explicit)), 20))


def test_max_epochs_caps_over_planned_steps(sft_dir, stream_dir):
    mixture = sources(sft_dir, stream_dir, max_epochs=0.5)
    chat_rows = figures(mixture[0])[1]
    planned = 3 * chat_rows  # steps of 4 rows: chat at most 0.5 * chat_rows of 12 * chat_rows
    loader = tokenfeed.Loader(keys(mixture, mixture_temperature=1.0, mixture_planned_steps=planned))
    cap = int(np.floor(0.5 * chat_rows / (planned * 4) * 10**6))
    assert weights(loader) == [f"0.{cap:06d}", f"0.{10**6 - cap:06d}"]
    ids = source_ids(loader, planned)
    assert (ids == 0).sum() <= 0.5 * chat_rows


def test_bad_mapping_configs_name_the_source_or_key(sft_dir, stream_dir):
    with pytest.raises(tokenfeed.ConfigError, match="mixture source 'chat': weight 'auto' needs"):
        tokenfeed.Loader(keys(sources(sft_dir, stream_dir)))
    with pytest.raises(tokenfeed.ConfigError, match="mixture source 'chat': max_epochs needs"):
        tokenfeed.Loader(keys(sources(sft_dir, stream_dir, max_epochs=2), mixture_temperature=0.3))
    with pytest.raises(tokenfeed.ConfigError, match="temperature must be in"):
        tokenfeed.Loader(keys(sources(sft_dir, stream_dir), mixture_temperature=2))
    with pytest.raises(tokenfeed.ConfigError, match="mixture_temperature"):
        tokenfeed.Loader(keys(sources(sft_dir, stream_dir), mixture_temperature="warm"))
    with pytest.raises(tokenfeed.ConfigError, match="mixture source 'chat': config key 'max_epochs': expected a number, got 'true'"):
        tokenfeed.Loader(keys(sources(sft_dir, stream_dir, max_epochs=True), mixture_temperature=0.3,
                              mixture_planned_steps=10))
    with pytest.raises(tokenfeed.ConfigError, match="mixture_planned_steps"):
        tokenfeed.Loader(keys(sources(sft_dir, stream_dir, max_epochs=2), mixture_temperature=0.3,
                              mixture_planned_steps=2.5))
