"""The native byte-level BPE (make_tokenizer("hf-bpe:FILE")) gives exactly the ids of the
`tokenizers` package's encode(text, add_special_tokens=False), on a hard corpus and on random
text, for tokenizer.json files trained in each supported family's configuration
(hf_bpe_families.py); a file it cannot reproduce is refused with the feature named."""
import json
import random

import pytest

import tokenfeed

tokenizers = pytest.importorskip("tokenizers")
import hf_bpe_families as families  # noqa: E402


@pytest.fixture(scope="module", params=sorted(families.FAMILIES))
def family(request, tmp_path_factory):
    path = families.FAMILIES[request.param](tmp_path_factory.mktemp(request.param) / "tokenizer.json")
    return request.param, tokenizers.Tokenizer.from_file(str(path)), tokenfeed.make_tokenizer(f"hf-bpe:{path}")


def first_difference(reference, ours):
    for i, (a, b) in enumerate(zip(reference, ours)):
        if a != b:
            return i
    return min(len(reference), len(ours))


def assert_same_ids(name, reference, native, docs):
    for doc in docs:
        want = reference.encode(doc, add_special_tokens=False).ids
        got = native.encode(doc).tolist()
        if want != got:
            i = first_difference(want, got)
            pytest.fail(f"{name}: ids differ at {i} for {doc[:200]!r}: tokenizers {want[max(0, i - 3):i + 4]}, "
                        f"native {got[max(0, i - 3):i + 4]}")


def test_hard_corpus_ids_equal_tokenizers(family):
    name, reference, native = family
    docs = families.hard_documents(1500, seed=1, extra=families.ADDED_CONTENTS)
    assert_same_ids(name, reference, native, docs)
    # The added tokens did match somewhere: the comparison covers them.
    added = {t.content for t in reference.get_added_tokens_decoder().values()}
    assert any(reference.decode([i], skip_special_tokens=False) in added
               for doc in docs[-200:] for i in native.encode(doc).tolist())


def test_one_megabyte_documents(family):
    name, reference, native = family
    rng = random.Random(5)
    words = families.HARD_PIECES + ["the", "of", "and", " ", "\n"]
    prose = "".join(rng.choice(words) + rng.choice([" ", "", "\n"]) for _ in range(120_000))[:1 << 20]
    no_spaces = "x" * (1 << 20)  # one pre-tokenizer piece of 1 MB: the long-piece merge path
    spaces = " " * (1 << 20)
    assert_same_ids(name, reference, native, [prose, no_spaces, spaces])


def random_text(rng, added):
    """Random code points from every range the corpus cares about, with added tokens mixed in."""
    ranges = [(0x20, 0x7E), (0x09, 0x0D), (0xA0, 0x17F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
              (0x590, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x3000, 0x303F),
              (0x4E00, 0x4E80), (0xAC00, 0xAC80), (0xE000, 0xE010), (0xFFF0, 0xFFFF), (0x1F300, 0x1F6FF),
              (0x1F3FB, 0x1F3FF), (0x200D, 0x200D), (0xFE00, 0xFE0F), (0x10FFF0, 0x10FFFF)]
    out = []
    for _ in range(rng.randint(0, 60)):
        r = rng.random()
        if r < 0.08:
            out.append(rng.choice(added))
        elif r < 0.14:  # a contraction, each letter in either case
            out.append("".join(c.upper() if rng.random() < 0.5 else c
                               for c in rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"])))
        elif r < 0.2:
            out.append(rng.choice([" ", "  ", "\t", "\r\n", "\n", "\u0085", "\u1680", "\ufeff", "123", "4567"]))
        else:
            lo, hi = rng.choice(ranges)
            out.append(chr(rng.randint(lo, hi)))
    return "".join(out)


def test_random_text_ids_equal_tokenizers(family):
    """The differential fuzz: seeded random text, every document compared."""
    name, reference, native = family
    rng = random.Random(41)
    docs = [random_text(rng, families.ADDED_CONTENTS) for _ in range(3000)]
    assert_same_ids(name, reference, native, docs)


def test_decode_gives_the_text_back(family):
    name, reference, native = family
    for doc in families.hard_documents(200, seed=3, extra=families.ADDED_CONTENTS):
        ids = native.encode(doc)
        want = reference.decode(ids.tolist(), skip_special_tokens=False)
        try:
            got = native.decode(ids)
        except UnicodeDecodeError:  # an added token's text through the ByteLevel decoder is not
            assert "\ufffd" in want, name  # UTF-8 (e.g. "caf\u00e9!"): tokenizers gives U+FFFD
            continue
        assert got == want, name


def refused(tmp_path, mutate):
    path = families.gpt2(tmp_path / "base.json")
    spec = json.loads(path.read_text(encoding="utf-8"))
    mutate(spec)
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(tokenfeed.ConfigError) as e:
        tokenfeed.make_tokenizer(f"hf-bpe:{path}")
    return str(e.value)


def test_unsupported_features_are_refused_by_name(tmp_path):
    assert "'Lowercase'" in refused(tmp_path, lambda s: s.update(normalizer={"type": "Lowercase"}))
    assert "'Metaspace'" in refused(tmp_path, lambda s: s.update(
        pre_tokenizer={"type": "Metaspace", "replacement": "_", "prepend_scheme": "always", "split": True}))
    assert "model.byte_fallback" in refused(tmp_path, lambda s: s["model"].update(byte_fallback=True))
    assert "'Digits'" in refused(tmp_path, lambda s: s.update(pre_tokenizer={
        "type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True},
                                              {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}))
