"""Byte-level BPE tokenizer.json files trained with the `tokenizers` package in each supported
family's configuration, and the hard corpus the native encoder is compared on
(test_hf_bpe_native.py, perf/hf_bpe_bench.py)."""
import json
import random
from pathlib import Path
from typing import Callable, Dict, List

GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Pieces of hard text: every script, joiner and white space kind the encoders must agree on.
HARD_PIECES = [
    "Hello world", "it's", "IT'S", "We'Re", "they've", "I'M", "you'll", "YOU'LL", "he'd", "He'D", "'s'", "'ſ", "'K",
    "Don't", "o'clock", "rock 'n' roll", "don\u2019t",
    "\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466", "\U0001F44D\U0001F3FD", "\U0001F1EB\U0001F1F7",
    "\u2764\ufe0f", "e\u0301", "n\u0303o", "A\u030A", "\u1100\u1161\u11A8", "\uD55C\uAD6D\uC5B4", "\u65E5\u672C\u8A9E",
    "\u4E2D\u6587\u5B57", "\u0645\u0631\u062D\u0628\u0627", "\u05E9\u05DC\u05D5\u05DD", "\u0928\u092E\u0938\u094D\u0924\u0947",
    "\u0939\u093F\u0928\u094D\u0926\u0940", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "caf\u00e9", "na\u00efve", "\u00c5ngstr\u00f6m",
    "12345678901234567890", "3.14159", "1,000,000", "\u0661\u0662\u0663", "\u2163", "\u00bd", "x\u00b2",
    "\t", "\r\n", "\n\n\n", "   ", "\u00a0", "\u3000", "\u2028", "\u200b", "\u2009", " \t \n ",
    "\ufffd", "\ue000", "\U000F0000", "\ufdd0", "\uffff", "\U0010FFFF", "\u0000", "\x7f", "\u0085",
    "<html>", "</div>", "{\"a\": [1, 2]}", "a_b_c", "--flag", "...", "!!!", "$$", "@user", "#tag",
    "MixedCase", "UPPER", "lower", "\u0130stanbul", "\u00df", "\u1e9e", "\ufb01", "Stra\u00dfe",
]


def hard_documents(count: int, seed: int = 0, extra: List[str] = ()) -> List[str]:
    """`count` documents joining random hard pieces (and `extra`, e.g. added tokens) with
    random separators, plus the single pieces themselves."""
    rng = random.Random(seed)
    pieces = list(HARD_PIECES) + list(extra)
    seps = ["", " ", "  ", "\n", "\t", "\r\n", "\u00a0", "\u3000", ", ", "'"]
    docs = list(pieces)
    for _ in range(count):
        n = rng.randint(1, 30)
        docs.append("".join(rng.choice(pieces) + rng.choice(seps) for _ in range(n)))
    return docs


def training_texts() -> List[str]:
    base = ("The quick brown fox jumps over the lazy dog. It's what we've said: they'll do it, I'm sure. "
            "Numbers 1234567890 and 3.14. ")
    return [base * 3] + hard_documents(400, seed=99)


def _train(pre_tokenizer, normalizer, special: List[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=special, show_progress=False)
    tok.train_from_iterator(training_texts(), trainer)
    return tok


def _added_tokens(tok) -> None:
    """Added tokens with each flag, special and not, normalized and not."""
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True, normalized=False),
                            AddedToken("<|im_end|>", special=True, normalized=False)])
    tok.add_tokens([
        AddedToken("[WORD]", single_word=True, normalized=False),
        AddedToken("<L>", lstrip=True, normalized=False),
        AddedToken("<R>", rstrip=True, normalized=False),
        AddedToken("<LR>", lstrip=True, rstrip=True, normalized=True),
        AddedToken("caf\u00e9!", normalized=True),
        AddedToken("<|im", normalized=False),
    ])


ADDED_CONTENTS = ["<|im_start|>", "<|im_end|>", "[WORD]", "<L>", "<R>", "<LR>", "caf\u00e9!", "cafe\u0301!", "<|im",
                  "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>"]


def gpt2(path: Path) -> Path:
    from tokenizers import pre_tokenizers
    tok = _train(pre_tokenizers.ByteLevel(add_prefix_space=False), None, ["<|endoftext|>"], 1200)
    tok.save(str(path))
    return path


def gpt2_prefix_space(path: Path) -> Path:
    from tokenizers import pre_tokenizers
    tok = _train(pre_tokenizers.ByteLevel(add_prefix_space=True), None, ["<|endoftext|>"], 900)
    _added_tokens(tok)
    tok.save(str(path))
    return path


def _split_family(path: Path, pattern: str, nfc: bool, ignore_merges: bool, special: List[str]) -> Path:
    from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = _train(pre, normalizers.NFC() if nfc else None, special, 1500)
    _added_tokens(tok)
    tok.save(str(path))
    spec = json.loads(path.read_text(encoding="utf-8"))
    spec["model"]["ignore_merges"] = ignore_merges
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    Tokenizer.from_file(str(path))  # still loads
    return path


def llama3(path: Path) -> Path:
    return _split_family(path, LLAMA3_PATTERN, nfc=False, ignore_merges=True,
                         special=["<|begin_of_text|>", "<|eot_id|>"])


def qwen2(path: Path) -> Path:
    return _split_family(path, QWEN2_PATTERN, nfc=True, ignore_merges=False, special=["<|endoftext|>"])


def split_behaviors(path: Path) -> Path:
    """Not a model family: a Sequence of Splits with String and Regex patterns, inverted and
    not, in each behavior, before ByteLevel with its own regex (what hf_bpe_spec.hpp lists
    beyond the families' files)."""
    from tokenizers import Regex, pre_tokenizers
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(" ", behavior="merged_with_previous", invert=True),
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="contiguous"),
        pre_tokenizers.Split("'", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[\r\n]+"), behavior="removed"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok = _train(pre, None, ["<|endoftext|>"], 1000)
    _added_tokens(tok)
    tok.save(str(path))
    return path


FAMILIES: Dict[str, Callable[[Path], Path]] = {
    "gpt2": gpt2, "gpt2_prefix_space": gpt2_prefix_space, "llama3": llama3, "qwen2_nfc": qwen2,
    "split_behaviors": split_behaviors,
}
