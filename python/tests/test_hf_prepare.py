"""Preparation with a Hugging Face tokenizer directory (tokenfeed.prepare(..., hf_tokenizer=)):
a small BPE trained here, chat templates in the styles real models use, and the assistant
mask checked by decoding what is trained, against transformers, and through the loader."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokenfeed

tokenizers = pytest.importorskip("tokenizers", reason="the [hf] extra (tokenizers) is not installed")
pytest.importorskip("jinja2", reason="the [hf] extra (jinja2) is not installed")

from tokenfeed import _chat_template, hf_prepare  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>"]

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

LLAMA3 = ("{{- bos_token }}{% for message in messages %}"
          "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
          "'<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")

GENERATION = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
              "{% if message['role'] == 'assistant' %}"
              "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\\n' }}"
              "{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
              "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

DEFAULT_SYSTEM = ("{% for message in messages %}"
                  "{% if loop.first and messages[0]['role'] != 'system' %}"
                  "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
                  "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

# Hermes / Qwen 2.5 style: tools in the system turn, tool calls as JSON in <tool_call> tags,
# tool results in the user turn.
TOOLS = ("{%- if tools %}{{- '<|im_start|>system\\n' }}"
         "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] + '\\n\\n' }}{%- endif %}"
         "{{- 'Tools:' }}{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}{{- '<|im_end|>\\n' }}"
         "{%- elif messages[0]['role'] == 'system' %}"
         "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}{%- endif %}"
         "{%- for message in messages %}"
         "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
         "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
         "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant' }}"
         "{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"
         "{%- for call in message.tool_calls | default([]) %}"
         "{{- '\\n<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' + "
         "(call.function.arguments | tojson) + '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
         "{%- elif message.role == 'tool' %}"
         "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
         "{%- endif %}{%- endfor %}"
         "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")

# Renders the last message differently from the same message inside a longer conversation:
# the prefixes are not prefixes, which must be an error, not a wrong mask.
INCONSISTENT = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']}}"
                "{% if loop.last %}{{' (end)'}}{% endif %}{{'<|im_end|>\\n'}}{% endfor %}"
                "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")

WORDS = ("the a model data token loss train batch reply question answer weather city rain sun cold warm tool "
         "call result value number list sort find add two three four five hello thanks sure here is what "
         "why how when café naïve über").split()


def sentence(rng, n=None):
    return " ".join(rng.choice(WORDS) for _ in range(n or rng.randint(2, 12))).capitalize() + rng.choice(".?!")


def make_conversations(rng, n, with_tools=False):
    """n multi-turn conversations; user/system/tool texts carry markers never in replies."""
    out = []
    for c in range(n):
        messages = []
        if rng.random() < 0.5:
            messages.append({"role": "system", "content": f"SYSMARK{c} " + sentence(rng)})
        for t in range(rng.randint(1, 3)):
            messages.append({"role": "user", "content": f"USERMARK{c}x{t} " + sentence(rng)})
            if with_tools and rng.random() < 0.5:
                messages.append({"role": "assistant", "content": "",
                                 "tool_calls": [{"type": "function", "function": {
                                     "name": "lookup", "arguments": {"query": sentence(rng, 2), "n": t}}}]})
                messages.append({"role": "tool", "content": f"TOOLMARK{c}x{t} " + sentence(rng)})
            reply = sentence(rng) + (" " + sentence(rng) if rng.random() < 0.5 else "")
            messages.append({"role": "assistant", "content": reply})
        out.append({"messages": messages})
    return out


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    """A byte-level BPE trained on a few KB of text, with the templates' special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    rng = random.Random(7)
    text = [sentence(rng) for _ in range(800)] + ["USERMARK SYSMARK TOOLMARK tool_call tool_response {\"name\":"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tok.save(str(path))
    return path


def tokenizer_dir(root, tokenizer_json, template, **config):
    d = Path(root)
    d.mkdir(parents=True, exist_ok=True)
    (d / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template, "eos_token": "<|endoftext|>",
           "bos_token": "<|begin_of_text|>", "model_max_length": 100000}
    cfg.update(config)
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    return d


def write_jsonl(path, records):
    Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def read_episodes(split_dir, dtype):
    """Every (ids, mask) of a split, in order."""
    out = []
    for shard in sorted(Path(split_dir).iterdir()):
        tokens = np.fromfile(shard / "tokens.bin", dtype=dtype)
        mask = np.fromfile(shard / "mask.bin", dtype=np.uint8)
        index = np.fromfile(shard / "episodes.idx", dtype=np.uint64).reshape(-1, 2)
        out += [(tokens[s:s + n].astype(np.uint32), mask[s:s + n]) for s, n in index]
    return out


def trained_runs(tok, ids, mask):
    """The decoded text of each run of consecutive trained tokens."""
    runs, current = [], []
    for i, m in zip(ids.tolist(), mask.tolist()):
        if m:
            current.append(i)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tok.decode(r, skip_special_tokens=False) for r in runs]


def tool_call_text(call):
    f = call["function"]
    arguments = json.dumps(f["arguments"], ensure_ascii=False)
    return '\n<tool_call>\n{"name": "' + f["name"] + '", "arguments": ' + arguments + "}\n</tool_call>"


# template, end-of-turn text, how a reply renders
STYLES = {
    "chatml": (CHATML, "<|im_end|>", lambda m: m["content"]),
    "llama3": (LLAMA3, "<|eot_id|>", lambda m: m["content"].strip()),
    "generation": (GENERATION, "<|im_end|>", lambda m: m["content"]),
    "default_system": (DEFAULT_SYSTEM, "<|im_end|>", lambda m: m["content"]),
    "tools": (TOOLS, "<|im_end|>", lambda m: tools_reply(m)),
}


def tools_reply(m):
    """What TOOLS renders after '<|im_start|>assistant', without the newline that the
    generation prompt ('<|im_start|>assistant\\n') already holds."""
    text = ("\n" + m["content"] if m["content"] else "") + "".join(tool_call_text(c) for c in m.get("tool_calls", []))
    assert text.startswith("\n")
    return text[1:]


@pytest.mark.parametrize("style", sorted(STYLES))
def test_trained_tokens_are_exactly_the_replies_and_their_end_of_turn(style, tokenizer_json, tmp_path):
    template, eot_text, reply = STYLES[style]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    conversations = make_conversations(random.Random(style), 40, with_tools=style == "tools")
    if style == "tools":
        for c in conversations[::2]:
            c["tools"] = tools
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, template)
    src = write_jsonl(tmp_path / "chats.jsonl", conversations)
    out = tmp_path / "ds"
    summary = tokenfeed.prepare(src, out, hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    assert summary["splits"]["train"]["episodes"] == len(conversations)
    tok = tokenizers.Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    episodes = read_episodes(out / "train", np.uint16)
    assert len(episodes) == len(conversations)
    for conversation, (ids, mask) in zip(conversations, episodes):
        replies = [m for m in conversation["messages"] if m["role"] == "assistant"]
        assert trained_runs(tok, ids, mask) == [reply(m) + eot_text for m in replies]
        # The whole episode is the template's rendering, tokenized as is.
        assert tok.decode(ids.tolist(), skip_special_tokens=False).count(eot_text) >= len(replies)
        trained_text = "".join(trained_runs(tok, ids, mask))
        for marker in ("USERMARK", "SYSMARK", "TOOLMARK", "You are a helpful", "Tools:", "<|im_start|>",
                       "<|start_header_id|>", "<tool_response>"):
            assert marker not in trained_text

    meta = json.loads((out / "dataset_metadata.json").read_text())
    assert meta["token_dtype"] == "uint16" and meta["mask_dtype"] == "uint8"
    assert meta["vocab_size"] == tok.get_vocab_size(with_added_tokens=True)
    assert meta["eot_token_id"] == tok.token_to_id(eot_text)
    assert meta["eos_token_id"] == tok.token_to_id("<|endoftext|>")
    assert "pad_token_id" not in meta  # this tokenizer has no pad token
    assert meta["special_token_ids"] == {s: tok.token_to_id(s) for s in SPECIALS}
    assert "special_tokens" not in meta  # the built-in template's role ids do not apply
    import hashlib
    tokenizer_sha = hashlib.sha256((hf_dir / "tokenizer.json").read_bytes()).hexdigest()
    assert meta["tokenizer"]["tokenizer_json_sha256"] == tokenizer_sha
    assert meta["tokenizer"]["chat_template_sha256"] == hashlib.sha256(template.encode()).hexdigest()
    assert ("generation" in meta["chat_template"]["loss_mask"]) == (style == "generation")


def test_weight_zero_turns_are_not_trained(tokenizer_json, tmp_path):
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, CHATML)
    gen_dir = tokenizer_dir(tmp_path / "gen", tokenizer_json, GENERATION)
    conversation = {"messages": [{"role": "user", "content": "Hello"},
                                 {"role": "assistant", "content": "Bad answer.", "weight": 0},
                                 {"role": "user", "content": "Again"},
                                 {"role": "assistant", "content": "Good answer.", "weight": 1}]}
    src = write_jsonl(tmp_path / "c.jsonl", [conversation])
    tok = tokenizers.Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    for d, name in ((hf_dir, "a"), (gen_dir, "b")):
        tokenfeed.prepare(src, tmp_path / name, hf_tokenizer=d, workers=1, val_split=0.0)
        [(ids, mask)] = read_episodes(tmp_path / name / "train", np.uint16)
        assert trained_runs(tok, ids, mask) == ["Good answer.<|im_end|>"]
        assert "Bad answer." in tok.decode(ids.tolist())
    # A conversation with nothing to train is a bad record.
    write_jsonl(src, [{"messages": conversation["messages"][:2]}])
    with pytest.raises(tokenfeed.FormatError, match=r"c\.jsonl:1: empty_mask"):
        tokenfeed.prepare(src, tmp_path / "c", hf_tokenizer=hf_dir, workers=1, val_split=0.0)


def assert_same_as_transformers(conversations, dataset, reference_dir):
    """Each episode of the dataset's train split (the conversations', in order) has the ids and
    the mask of transformers' apply_chat_template(..., return_assistant_tokens_mask=True) with
    the tokenizer directory reference_dir. Returns the episodes."""
    import transformers
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(reference_dir))
    episodes = read_episodes(Path(dataset) / "train", np.uint16)
    for conversation, (ids, mask) in zip(conversations, episodes):
        ref = hf_tok.apply_chat_template(conversation["messages"], tokenize=True, return_assistant_tokens_mask=True,
                                         return_dict=True)
        assert ids.tolist() == list(ref["input_ids"])
        assert mask.tolist() == list(ref["assistant_masks"])
    return episodes


def test_generation_template_matches_transformers(tokenizer_json, tmp_path):
    pytest.importorskip("transformers")
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, GENERATION)
    conversations = make_conversations(random.Random(3), 30)
    src = write_jsonl(tmp_path / "chats.jsonl", conversations)
    tokenfeed.prepare(src, tmp_path / "ds", hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    for _, mask in assert_same_as_transformers(conversations, tmp_path / "ds", hf_dir):
        assert mask.any()


def test_prefix_mask_matches_transformers_on_the_same_template_with_generation_blocks(tokenizer_json, tmp_path):
    """Without {% generation %}, the prefix renderings find what the template's generation
    blocks would mark (ChatML: the reply and <|im_end|>, not the newline after it)."""
    pytest.importorskip("transformers")
    plain = tokenizer_dir(tmp_path / "plain", tokenizer_json, CHATML)
    marked = tokenizer_dir(tmp_path / "marked", tokenizer_json, GENERATION)
    conversations = make_conversations(random.Random(4), 20)
    src = write_jsonl(tmp_path / "chats.jsonl", conversations)
    tokenfeed.prepare(src, tmp_path / "ds", hf_tokenizer=plain, workers=1, val_split=0.0)
    assert_same_as_transformers(conversations, tmp_path / "ds", marked)


def ascii_text(text):
    """The text with the non-ASCII words of WORDS (café, naïve, über) spelt in ASCII."""
    text = text.translate(str.maketrans("éïüÜ", "eiuU"))
    assert text.isascii()
    return text


def ascii_conversations(rng, n):
    conversations = make_conversations(rng, n)
    for c in conversations:
        for m in c["messages"]:
            m["content"] = ascii_text(m["content"])
    return conversations


def test_ascii_conversations_match_transformers_without_the_tokenizers_offsets(tokenizer_json, tmp_path):
    """An ASCII conversation and a byte-level BPE: the tokens' characters come from their texts
    instead of the tokenizer's offsets (see _TokenPieces); the masks are transformers', with
    {% generation %} and with prefix renderings."""
    pytest.importorskip("transformers")
    plain = tokenizer_dir(tmp_path / "plain", tokenizer_json, CHATML)
    marked = tokenizer_dir(tmp_path / "marked", tokenizer_json, GENERATION)
    assert hf_prepare.HfTokenizer(plain).pieces is not None
    conversations = ascii_conversations(random.Random(15), 40)
    src = write_jsonl(tmp_path / "chats.jsonl", conversations)
    for hf_dir, name in ((marked, "g"), (plain, "p")):
        tokenfeed.prepare(src, tmp_path / name, hf_tokenizer=hf_dir, workers=1, val_split=0.0)
        assert_same_as_transformers(conversations, tmp_path / name, marked)


def test_token_texts_give_the_tokenizers_offsets(tokenizer_json, tmp_path):
    """_TokenPieces.tiling: for every token and every character of ASCII texts (special tokens,
    runs of spaces, tabs, newlines, control characters, digits), the same character ranges
    and char_to_token as the tokenizer's offsets; no tiling for ids that are not the text's,
    nor for tokenizers of another kind."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    hf = hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / "tok", tokenizer_json, CHATML))
    rng = random.Random(16)
    texts = ["<|im_start|>user\n" + ascii_text(sentence(rng)) + "<|im_end|>\n<|im_start|>assistant\n"
             for _ in range(20)]
    texts += ["  two  spaces\tand a tab\r\nline 123 4567, end.<|im_end|>", "\x00\x07\x7f<|eot_id|>x", " ", "a",
              "<|im_end|>", "USERMARK SYSMARK" * 30 + "\n\n\n" + "!?" * 7, "{\"name\": \"lookup\"}</tool_call>"]

    def check(hf):
        assert hf.pieces is not None
        for text in texts:
            enc = hf.tokenizer.encode(text, add_special_tokens=False)
            [fast] = hf.tokenizer.encode_batch_fast([text], add_special_tokens=False)
            assert fast.ids == enc.ids
            tiling = hf.pieces.tiling(text, fast.ids)
            assert tiling is not None, text
            assert len(tiling) == len(enc)
            assert tiling.offsets == [tuple(o) for o in enc.offsets], text
            assert [tiling.char_to_token(c) for c in range(-1, len(text) + 1)] == \
                [enc.char_to_token(c) if 0 <= c < len(text) else None for c in range(-1, len(text) + 1)], text

    check(hf)
    assert hf.pieces.tiling("the data", hf.tokenizer.encode("the date").ids) is None
    assert hf.pieces.tiling("", []) is None
    # A chunk's episodes are the same whether the tiling holds, fails (the tokenizer's offsets
    # are asked for after all) or is not tried.
    import datetime
    encoder = hf_prepare.ConversationEncoder(str(tmp_path / "tok"), "messages", 0, 0.0, datetime.datetime.now())
    records = [(f"r{i}", json.dumps(c)) for i, c in enumerate(ascii_conversations(rng, 8) + make_conversations(rng, 4))]
    results = [encoder.encode_chunk(records)]
    encoder.hf.pieces.pieces = ["x"] * len(encoder.hf.pieces.pieces)
    results.append(encoder.encode_chunk(records))
    assert encoder._untiled >= 8  # every ASCII conversation
    encoder.hf.pieces = None
    results.append(encoder.encode_chunk(records))
    for result in results[1:]:
        assert result.splits.keys() == results[0].splits.keys() == {False}
        for a, b in zip(result.splits[False], results[0].splits[False]):
            np.testing.assert_array_equal(a, b)
    # Llama 3 and Qwen 2: a Split before a ByteLevel without its regex, an NFC normalizer.
    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?"
                                              r"[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.save(str(tmp_path / "llama3.json"))
    check(hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / "llama3", tmp_path / "llama3.json", CHATML)))
    # Not for: trimmed offsets, a normalizer that changes ASCII, a prefix space, an added token
    # that takes the spaces beside it, a SentencePiece-style BPE.
    from tokenizers import AddedToken
    changes = {"trim": lambda t: setattr(t, "post_processor", processors.ByteLevel(trim_offsets=True)),
               "lower": lambda t: setattr(t, "normalizer", normalizers.Lowercase()),
               "prefix": lambda t: setattr(t, "pre_tokenizer", pre_tokenizers.ByteLevel(add_prefix_space=True)),
               "lstrip": lambda t: t.add_special_tokens([AddedToken("<mask>", lstrip=True)])}
    for name, change in changes.items():
        tok = Tokenizer.from_file(str(tokenizer_json))
        change(tok)
        tok.save(str(tmp_path / f"{name}.json"))
        assert hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / name, tmp_path / f"{name}.json", CHATML)).pieces is None
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS))
    tok.save(str(tmp_path / "metaspace.json"))
    assert hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / "ms", tmp_path / "metaspace.json", CHATML)).pieces is None


def test_parquet_and_jsonl_give_the_same_dataset(tokenizer_json, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, TOOLS)
    conversations = make_conversations(random.Random(5), 60, with_tools=True)
    for c in conversations[::3]:
        c["tools"] = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    jsonl = write_jsonl(tmp_path / "chats.jsonl", conversations)
    # As the Hugging Face datasets library stores them: a struct column whose fields are in
    # the data's key order (which the template's tojson sees), every key in every row (null
    # where absent), tools as a JSON string.
    arguments = pa.struct([("query", pa.string()), ("n", pa.int64())])
    function = pa.struct([("name", pa.string()), ("arguments", arguments)])
    call = pa.struct([("type", pa.string()), ("function", function)])
    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(call))])
    schema = pa.schema([("messages", pa.list_(message)), ("tools", pa.string())])
    rows = [{"messages": c["messages"], "tools": json.dumps(c["tools"]) if "tools" in c else None}
            for c in conversations]
    parquet = tmp_path / "chats.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), parquet, row_group_size=17)
    a, b = tmp_path / "from_jsonl", tmp_path / "from_parquet"
    tokenfeed.prepare(jsonl, a, hf_tokenizer=hf_dir, val_split=0.3, seed=9, workers=1, chunk_records=7)
    tokenfeed.prepare(parquet, b, hf_tokenizer=hf_dir, val_split=0.3, seed=9, workers=2, chunk_records=5)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert Path("val/shard_00000/tokens.bin") in files
    for f in files:
        if f.name.endswith(".bin") or f.name.endswith(".idx") or f.name == "tokenizer_state.json":
            assert (a / f).read_bytes() == (b / f).read_bytes(), f
    ma, mb = (json.loads((d / "dataset_metadata.json").read_text()) for d in (a, b))
    assert ma.pop("source")["format"] == "jsonl" and mb.pop("source")["format"] == "parquet"
    for m in (ma, mb):
        m["chat_template"].pop("strftime_now")  # each run's own time
    assert ma == mb
    # Another messages column name.
    pq.write_table(pa.Table.from_pylist([{"conv": c["messages"]} for c in conversations]), tmp_path / "c.parquet")
    with pytest.raises(tokenfeed.FormatError, match="no column 'messages'"):
        tokenfeed.prepare(tmp_path / "c.parquet", tmp_path / "c1", hf_tokenizer=hf_dir, val_split=0.0)
    s = tokenfeed.prepare(tmp_path / "c.parquet", tmp_path / "c2", hf_tokenizer=hf_dir, messages_field="conv", val_split=0.0)
    assert s["conversations"] == len(conversations)


def test_the_loader_reads_it_and_the_mask_aligns(tokenizer_json, tmp_path):
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, LLAMA3)
    conversations = make_conversations(random.Random(6), 50)
    src = write_jsonl(tmp_path / "chats.jsonl", conversations)
    out = tmp_path / "ds"
    tokenfeed.prepare(src, out, hf_tokenizer=hf_dir, workers=2, chunk_records=8, val_split=0.0)
    episodes = read_episodes(out / "train", np.uint16)
    by_ids = {ids.tobytes(): mask for ids, mask in episodes}
    eot = json.loads((out / "dataset_metadata.json").read_text())["eot_token_id"]
    loader = tokenfeed.Loader(dict(dataset_dir=str(out), batch_size=4, block_size=512, audit_log_dir="",
                                   prefetch_depth=2, decode_threads=1, dataset_mode="sft_episode",
                                   use_loss_mask=True))
    seen = 0
    for batch in loader.iter("train", steps=5):
        for row in range(batch.x.shape[0]):
            x, y, m = batch.x[row], batch.y[row], batch.mask[row]
            n = int((m > 0).nonzero()[0].max()) + 2 if (m > 0).any() else 0
            ids = np.concatenate([x[:1], y[:n - 1]]).astype(np.uint32)
            match = [k for k in by_ids if k.startswith(ids.tobytes())]
            assert match, "a batch row that is not a prepared episode"
            mask = by_ids[match[0]]
            # The loader's mask on y is the episode's mask shifted by one: it trains the
            # prediction of each assistant token.
            np.testing.assert_array_equal(m[:n - 1] > 0, mask[1:n] > 0)
            assert y[n - 2] == eot
            seen += 1
    assert seen == 20
    # No single role token in these templates, so no turn-aware truncation: a clear refusal.
    with pytest.raises(tokenfeed.ConfigError, match="truncation=right"):
        tokenfeed.Loader(dict(dataset_dir=str(out), batch_size=4, block_size=64, audit_log_dir="",
                              dataset_mode="sft_episode", use_loss_mask=True, truncation="drop_oldest_turns"))


def test_bad_conversations_name_the_record(tokenizer_json, tmp_path):
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, INCONSISTENT)
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    src = write_jsonl(tmp_path / "c.jsonl", [good])
    with pytest.raises(tokenfeed.FormatError, match=r"c\.jsonl:1: inconsistent_template: .*not a prefix"):
        tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    assert not (tmp_path / "o").exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

    ok = tokenizer_dir(tmp_path / "ok", tokenizer_json, CHATML)
    lines = [json.dumps(good), "{not json", json.dumps({"messages": [{"role": "user", "content": "x"}]}),
             json.dumps({"msgs": []}), "", json.dumps(good)]
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(tokenfeed.FormatError, match=r"c\.jsonl:2: invalid_json"):
        tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=ok, workers=2, val_split=0.0)
    assert not (tmp_path / "o").exists()
    s = tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=ok, on_error="skip", workers=1, val_split=0.0)
    assert s["conversations"] == 2 and s["skipped"]["invalid_json"] == 1 and s["skipped"]["no_assistant"] == 1
    assert s["skipped"]["bad_messages"] == 1
    assert s["first_skipped"]["no_assistant"].endswith("c.jsonl:3: the conversation has no assistant message")
    meta = json.loads((tmp_path / "o" / "dataset_metadata.json").read_text())
    assert meta["skipped"]["invalid_json"] == 1 and meta["source"]["blank_lines"] == 1
    assert list(meta["skipped"]) == list(hf_prepare.REASONS)  # every reason, counted or not
    # A raise_exception in the template names the record and the template's message.
    strict = tokenizer_dir(tmp_path / "strict", tokenizer_json,
                           "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}"
                           "{% endif %}"
                           + CHATML)
    write_jsonl(src, [good, {"messages": [{"role": "system", "content": "s"}] + good["messages"]}])
    with pytest.raises(tokenfeed.FormatError, match=r"c\.jsonl:2: template_error: .*first must be user"):
        tokenfeed.prepare(src, tmp_path / "p", hf_tokenizer=strict, workers=1, val_split=0.0)


def test_tokenizer_directory_errors(tokenizer_json, tmp_path):
    src = write_jsonl(tmp_path / "c.jsonl", [{"messages": [{"role": "user", "content": "a"},
                                                          {"role": "assistant", "content": "b"}]}])
    with pytest.raises(tokenfeed.ConfigError, match="Hub name.*downloads nothing"):
        tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer="meta-llama/Llama-3.1-8B-Instruct", val_split=0.0)
    with pytest.raises(tokenfeed.IoError, match="has no tokenizer_config.json"):
        os.makedirs(tmp_path / "partial")
        (tmp_path / "partial" / "tokenizer.json").write_bytes(Path(tokenizer_json).read_bytes())
        tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=tmp_path / "partial", val_split=0.0)
    no_template = tokenizer_dir(tmp_path / "nt", tokenizer_json, None)
    with pytest.raises(tokenfeed.FormatError, match="no chat_template"):
        tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=no_template, val_split=0.0)
    # chat_template.jinja beside the config, as newer transformers save it.
    (no_template / "chat_template.jinja").write_text(CHATML)
    tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=no_template, val_split=0.0)
    bad = tokenizer_dir(tmp_path / "bad", tokenizer_json, "{% for m in messages %}{{ m.content }")
    with pytest.raises(tokenfeed.FormatError, match="does not parse"):
        tokenfeed.prepare(src, tmp_path / "o2", hf_tokenizer=bad, val_split=0.0)
    with pytest.raises(tokenfeed.ConfigError, match="not empty"):
        tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=no_template, val_split=0.0)
    with pytest.raises(tokenfeed.UsageError, match="hf_tokenizer"):
        tokenfeed.prepare(src, tmp_path / "o3", val_split=0.0)


def test_large_vocabulary_is_written_as_uint32(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {f"w{i}": i for i in range(70000)}
    vocab["[UNK]"] = 70000
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    d = tmp_path / "tok"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"chat_template": CHATML, "eos_token": "<|im_end|>"}))
    src = write_jsonl(tmp_path / "c.jsonl", [{"messages": [{"role": "user", "content": "w1 w2"},
                                                           {"role": "assistant", "content": "w69999 w3"}]}])
    s = tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=d, workers=1, val_split=0.0)
    assert s["token_dtype"] == "uint32" and s["vocab_size"] == 70003
    [(ids, mask)] = read_episodes(tmp_path / "o" / "train", np.uint32)
    assert 69999 in ids[mask > 0].tolist()
    with pytest.raises(tokenfeed.ConfigError, match="uint16 cannot hold"):
        tokenfeed.prepare(src, tmp_path / "o2", hf_tokenizer=d, token_dtype="uint16", val_split=0.0)


def test_missing_extra_says_what_to_install(tmp_path):
    code = ("import sys; sys.modules['tokenizers'] = None\n"
            "import tokenfeed\n"
            "try:\n"
            "    tokenfeed.prepare('x.jsonl', 'out', hf_tokenizer='.')\n"
            "except tokenfeed.ConfigError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True)
    assert "pip install 'tokenfeed[hf]'" in out.stdout and "tokenizers" in out.stdout


def test_command_line(tokenizer_json, tmp_path):
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, CHATML)
    src = write_jsonl(tmp_path / "c.jsonl", make_conversations(random.Random(8), 10))
    run = subprocess.run([sys.executable, "-m", "tokenfeed.hf_prepare", "--input", str(src), "--output-dir",
                          str(tmp_path / "o"), "--hf-tokenizer", str(hf_dir), "--val-split", "0.2"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "tokenfeed prepare: wrote" in run.stdout and "conversations/s" in run.stdout
    run = subprocess.run([sys.executable, "-m", "tokenfeed.hf_prepare", "--input", str(src), "--output-dir",
                          str(tmp_path / "o"), "--hf-tokenizer", str(hf_dir)], capture_output=True, text=True)
    assert run.returncode == 2 and "not empty" in run.stderr


def test_tokenfeed_command_runs_the_python_preparation(tokenizer_json, tmp_path):
    """`tokenfeed prepare --hf-tokenizer` (the C++ command) hands the run to this package and
    gives the dataset the Python API gives, whatever the number of workers."""
    from conftest import _find_cli
    cli = _find_cli()
    if cli is None:
        pytest.skip("the tokenfeed command is not built (python/run_tests.sh sets TOKENFEED_CLI)")
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, LLAMA3)
    src = write_jsonl(tmp_path / "c.jsonl", make_conversations(random.Random(9), 30))
    env = dict(os.environ, TOKENFEED_PYTHON=sys.executable)
    run = subprocess.run([cli, "prepare", "--hf-tokenizer", str(hf_dir), "--input", str(src), "--output-dir",
                          str(tmp_path / "cli"), "--val-split", "0.2", "--seed", "3", "--workers", "2",
                          "--shard-tokens", "2000"], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "tokenfeed prepare: wrote" in run.stdout and run.stderr == ""
    tokenfeed.prepare(src, tmp_path / "api", hf_tokenizer=hf_dir, val_split=0.2, seed=3, workers=1, shard_tokens=2000)
    files = sorted(p.relative_to(tmp_path / "api") for p in (tmp_path / "api").rglob("*.*"))
    assert len([f for f in files if f.name == "tokens.bin"]) > 2  # several shards, both splits
    for f in files:
        if f.suffix in (".bin", ".idx"):
            assert (tmp_path / "cli" / f).read_bytes() == (tmp_path / "api" / f).read_bytes(), f
    # Errors keep the command's exit statuses: a bad record is 4, a bad directory 2.
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    run = subprocess.run([cli, "prepare", "--hf-tokenizer", str(hf_dir), "--input", str(tmp_path / "bad.jsonl"),
                          "--output-dir", str(tmp_path / "bad")], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 4 and "bad.jsonl:1: invalid_json" in run.stderr and len(run.stderr.splitlines()) == 1
    run = subprocess.run([cli, "prepare", "--hf-tokenizer", "org/model", "--input", str(src),
                          "--output-dir", str(tmp_path / "bad")], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 2 and "Hub name" in run.stderr
    assert not (tmp_path / "bad").exists()


def test_interrupted_run_leaves_nothing(tokenizer_json, tmp_path):
    """SIGTERM mid-run: the command removes its temporary output, says so and ends by the
    signal. A FIFO as input keeps the run going until the signal arrives."""
    import signal
    import threading
    import time
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, CHATML)
    fifo = tmp_path / "chats.fifo"
    os.mkfifo(fifo)
    line = "".join(json.dumps(c) + "\n" for c in make_conversations(random.Random(10), 50)).encode()
    stop = threading.Event()

    def feed():
        try:
            with open(fifo, "wb") as f:
                while not stop.is_set():
                    f.write(line)
        except OSError:
            pass  # the reader is gone

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "tokenfeed.hf_prepare", "--input", str(fifo), "--output-dir",
                             str(out), "--hf-tokenizer", str(hf_dir), "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not any(p.name.startswith(".out.tmp-") for p in tmp_path.iterdir()):
            assert time.monotonic() < deadline and proc.poll() is None, "the run did not start"
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "interrupted by SIGTERM" in stderr and "was not written" in stderr
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_gzip_jsonl_gives_the_same_dataset(tokenizer_json, tmp_path):
    import gzip
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, CHATML)
    plain = write_jsonl(tmp_path / "c.jsonl", make_conversations(random.Random(11), 20))
    packed = tmp_path / "c.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a = tokenfeed.prepare(plain, tmp_path / "a", hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    b = tokenfeed.prepare(packed, tmp_path / "b", hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    assert a["source"]["format"] == "jsonl" and b["source"]["format"] == "jsonl.gz"
    for f in ("tokens.bin", "mask.bin", "episodes.idx"):
        assert (tmp_path / "a" / "train" / "shard_00000" / f).read_bytes() == \
            (tmp_path / "b" / "train" / "shard_00000" / f).read_bytes()
    packed.write_bytes(gzip.compress(plain.read_bytes())[:-20])  # truncated
    with pytest.raises(tokenfeed.FormatError, match="c.jsonl.gz"):
        tokenfeed.prepare(packed, tmp_path / "c", hf_tokenizer=hf_dir, workers=1, val_split=0.0)


def test_template_helpers_strftime_now_and_loop_controls(tokenizer_json, tmp_path):
    """Llama 3.1-style: a date from strftime_now in the system header, system messages skipped
    with {% continue %} and folded into it, {% break %} after a stop marker."""
    import datetime
    template = ("{{- bos_token }}{{- '<|start_header_id|>system<|end_header_id|>\\n\\nToday Date: ' + "
                "strftime_now('%d %b %Y') }}{% for m in messages %}{% if m.role == 'system' %}{{ ' ' + m.content }}"
                "{% endif %}{% endfor %}{{- '<|eot_id|>' }}"
                "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
                "{% if m.content == 'STOP' %}{% break %}{% endif %}"
                "{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content | trim + '<|eot_id|>' }}"
                "{% endfor %}{% if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
                "{% endif %}")
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, template)
    conversation = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                 {"role": "assistant", "content": "Hello there."}, {"role": "user", "content": "More"},
                                 {"role": "assistant", "content": "Sure thing."}]}
    src = write_jsonl(tmp_path / "c.jsonl", [conversation])
    before = datetime.datetime.now().strftime("%d %b %Y")
    s = tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    [(ids, mask)] = read_episodes(tmp_path / "o" / "train", np.uint16)
    tok = tokenizers.Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    text = tok.decode(ids.tolist(), skip_special_tokens=False)
    assert f"Today Date: {before}" in text or before != datetime.datetime.now().strftime("%d %b %Y")
    assert "Be brief." in text and text.count("Be brief.") == 1
    assert trained_runs(tok, ids, mask) == ["Hello there.<|eot_id|>", "Sure thing.<|eot_id|>"]
    assert s["chat_template"]["strftime_now"].startswith(datetime.date.today().isoformat()[:4])
    # {% break %} drops the last reply from the rendering: its span cannot be found, an error.
    write_jsonl(src, [{"messages": conversation["messages"][:3] + [{"role": "user", "content": "STOP"},
                                                                    {"role": "assistant", "content": "Dropped."}]}])
    with pytest.raises(tokenfeed.FormatError, match=r"c\.jsonl:1: inconsistent_template: .*assistant message 4"):
        tokenfeed.prepare(src, tmp_path / "p", hf_tokenizer=hf_dir, workers=1, val_split=0.0)


def test_leftovers_of_killed_runs_are_removed(tokenizer_json, tmp_path):
    """A run killed outright leaves .NAME.tmp-PID-RANDOM; the next run into NAME removes it
    when its process is gone and nobody holds its lock, and leaves a live run's alone."""
    import fcntl
    hf_dir = tokenizer_dir(tmp_path / "tok", tokenizer_json, CHATML)
    src = write_jsonl(tmp_path / "c.jsonl", make_conversations(random.Random(12), 5))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f".out.tmp-{gone.stdout.strip()}-00ff"
    (dead / ".train.tmp-1-2").mkdir(parents=True)
    (dead / "dataset_metadata.json").write_text("{}")
    live = tmp_path / f".out.tmp-{os.getpid()}-abcd"  # this process's, locked: a live run
    live.mkdir()
    fd = os.open(live, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    foreign = tmp_path / f".out.tmp-{gone.stdout.strip()}-beef"
    (foreign / "precious.txt").parent.mkdir()
    (foreign / "precious.txt").write_text("not ours")
    try:
        s = tokenfeed.prepare(src, tmp_path / "out", hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    finally:
        os.close(fd)
    assert s["removed_stale_dirs"] == [str(dead)]
    assert not dead.exists() and live.exists() and foreign.exists() and (tmp_path / "out" / "train").is_dir()


def test_trimmed_offsets_match_transformers(tmp_path):
    """A GPT-2-style tokenizer whose post-processor trims offsets (whitespace tokens then
    cover no character): the mask is still transformers' overlap rule, token for token."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    rng = random.Random(13)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    tok.train_from_iterator([sentence(rng) for _ in range(400)],
                            trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(tmp_path / "tokenizer.json"))
    hf_dir = tokenizer_dir(tmp_path / "tok", tmp_path / "tokenizer.json", GENERATION)
    conversations = make_conversations(rng, 20)
    for c in conversations:  # replies of several paragraphs, and spaces around them
        for m in c["messages"]:
            if m["role"] == "assistant":
                m["content"] = " " + m["content"] + "\n\n  " + sentence(rng) + "\n"
    src = write_jsonl(tmp_path / "c.jsonl", conversations)
    tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=hf_dir, workers=1, val_split=0.0)
    assert_same_as_transformers(conversations, tmp_path / "o", hf_dir)


def test_jinja2_older_than_3_1_6_is_refused(tokenizer_json, tmp_path, monkeypatch):
    """jinja2 3.1.5 and older let a template read the environment (CVE-2025-27516): the
    package requires 3.1.6, and a user's environment holding an older one is refused before
    any template renders."""
    import datetime
    import jinja2
    from conftest import REPO
    assert '"jinja2>=3.1.6"' in (REPO / "pyproject.toml").read_text()
    hf = hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / "tok", tokenizer_json, CHATML))
    for old in ("3.1.5", "3.0.3", "2.11.3", ""):
        monkeypatch.setattr(jinja2, "__version__", old)
        with pytest.raises(tokenfeed.ConfigError, match=r"jinja2 >= 3\.1\.6 .*CVE-2025-27516"):
            hf_prepare.ChatTemplate(hf, datetime.datetime.now())
    monkeypatch.setattr(jinja2, "__version__", "3.1.6")
    assert hf_prepare.ChatTemplate(hf, datetime.datetime.now()).render([{"role": "user", "content": "hi"}])[0]


@pytest.mark.parametrize("template", ["{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}"
                                      "{% endfor %}", GENERATION.replace("{% generation %}",
                                      "{% generation %}{% for i in range(1000) %}{{ 'y' * 1000 }}{% endfor %}")])
def test_a_rendering_past_the_size_limit_is_a_template_error(tokenizer_json, tmp_path, monkeypatch, template):
    import datetime
    import time
    monkeypatch.setattr(_chat_template, "MAX_RENDERED_CHARS", 50_000)  # read where the rendering is
    hf = hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / "tok", tokenizer_json, template))
    chat = hf_prepare.ChatTemplate(hf, datetime.datetime.now())
    started = time.monotonic()
    with pytest.raises(hf_prepare.BadRecord, match="passed 50000 characters, the per-conversation limit") as e:
        chat.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert e.value.reason == "template_error"
    assert time.monotonic() - started < 10


def test_deeply_nested_json_and_lone_surrogates_are_bad_records(tokenizer_json, tmp_path):
    """Skipped and counted under --on-error skip; with fail, an error naming file and line,
    never an uncaught RecursionError or UnicodeEncodeError."""
    ok = tokenizer_dir(tmp_path / "ok", tokenizer_json, CHATML)
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    deep = '{"messages": ' + "[" * 200_000 + "]" * 200_000 + "}"
    surrogate = json.dumps(good).replace("Hello.", "Hel\\ud800lo.")
    src = tmp_path / "c.jsonl"
    src.write_text("\n".join([json.dumps(good), deep, surrogate, json.dumps(good)]) + "\n")
    s = tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=ok, on_error="skip", workers=1, val_split=0.0)
    assert s["conversations"] == 2 and s["skipped"]["invalid_json"] == 2, s
    assert "c.jsonl:2: nested too deeply" in s["first_skipped"]["invalid_json"]
    for line, needle in ((2, "nested too deeply"), (3, r"lone surrogate \(\\ud800\)")):
        lines = [json.dumps(good)] * 3
        lines[line - 1] = deep if line == 2 else surrogate
        src.write_text("\n".join(lines) + "\n")
        with pytest.raises(tokenfeed.FormatError, match=rf"c\.jsonl:{line}: invalid_json: .*{needle}"):
            tokenfeed.prepare(src, tmp_path / f"f{line}", hf_tokenizer=ok, workers=1, val_split=0.0)


def test_a_line_past_max_line_bytes_is_a_bad_record_read_in_bounded_pieces(tokenizer_json, tmp_path):
    ok = tokenizer_dir(tmp_path / "ok", tokenizer_json, CHATML)
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    long = {"messages": [{"role": "user", "content": "x" * 5000}, {"role": "assistant", "content": "Hello."}]}
    src = write_jsonl(tmp_path / "c.jsonl", [good, long, good])
    size = len(json.dumps(long))
    s = tokenfeed.prepare(src, tmp_path / "o", hf_tokenizer=ok, on_error="skip", workers=1, max_line_bytes=1000, val_split=0.0)
    assert s["conversations"] == 2 and s["skipped"]["invalid_json"] == 1, s
    assert s["first_skipped"]["invalid_json"].endswith(f"c.jsonl:2: the line is {size} bytes, longer than the "
                                                       "limit of 1000 (max_line_bytes)")
    with pytest.raises(tokenfeed.FormatError, match=r"c\.jsonl:2: invalid_json: the line is \d+ bytes"):
        tokenfeed.prepare(src, tmp_path / "f", hf_tokenizer=ok, workers=1, max_line_bytes=1000, val_split=0.0)
    # The default limit takes it, and the input's hash covers every byte either way.
    assert tokenfeed.prepare(src, tmp_path / "d", hf_tokenizer=ok, workers=1)["conversations"] == 3


def test_a_rendering_past_the_time_limit_is_a_template_error(tokenizer_json, tmp_path, monkeypatch):
    """Nested loops that output nothing are stopped by the time limit, not run for hours."""
    import datetime
    import time
    monkeypatch.setattr(_chat_template, "MAX_RENDER_SECONDS", 0.5)  # read where the rendering is
    template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}" + CHATML
    hf = hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / "tok", tokenizer_json, template))
    chat = hf_prepare.ChatTemplate(hf, datetime.datetime.now())
    started = time.monotonic()
    with pytest.raises(hf_prepare.BadRecord, match=r"ran past 0\.5 s, the per-conversation limit") as e:
        chat.render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}])
    assert e.value.reason == "template_error"
    assert time.monotonic() - started < 5
    monkeypatch.setattr(_chat_template, "MAX_RENDER_SECONDS", 10.0)  # the next conversation has its own time
    assert hf_prepare.ChatTemplate(hf_prepare.HfTokenizer(tokenizer_dir(tmp_path / "ok", tokenizer_json, CHATML)),
                                   datetime.datetime.now()).render([{"role": "user", "content": "hi"}])[0]
