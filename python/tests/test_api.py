"""Iteration, the len-like facts, stats (against `tokenfeed bench`), config values, and the
package's types: the generated stub against the real module, and the pure-Python part's
inline annotations."""
import ast
import collections.abc
import inspect
import json
import re
import types
from pathlib import Path

import numpy as np
import pytest

import tokenfeed
from conftest import SPECIAL, base_keys, run_cli, special_ids, write_config


def test_iter(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    it = loader.iter("train", steps=7)
    assert len(it) == 7
    assert [b.step for b in it] == list(range(7))
    assert len(it) == 0
    endless = loader.iter("val")
    with pytest.raises(TypeError):
        len(endless)
    assert [next(endless).step for _ in range(3)] == [0, 1, 2]
    assert [b.split for b in loader.iter("val", steps=2)] == ["val", "val"]


def test_facts_and_stats(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    info = loader.info("train")
    assert info["episodes"] == 300 and info["kept_episodes"] == 300 and info["mask"]
    assert info["shards"] > 1  # shard_tokens=20000
    assert loader.num_episodes() == 300 and loader.num_episodes("val") == 40
    assert loader.batches_per_epoch() == 300 // 4
    epochs = set()
    for batch in loader.iter("train", steps=loader.batches_per_epoch() + 1):
        epochs.add(batch.epoch)
    assert epochs == {0, 1}
    s = loader.stats("train")
    assert s["batches"] == 76 and s["batches_per_epoch"] == 75
    for key in ("batches_per_s", "tokens_per_s", "real_tokens_per_s", "stall_fraction", "slow_call_fraction",
                "open_ms", "prefetch_depth", "prefetch_depth_setting", "decode_threads", "rss_anon_mb", "waits",
                "total_wait_us", "max_wait_us", "warmup"):
        assert key in s, key
    assert set(s["get_batch_us"]) == {"p50", "p99", "max", "mean"}
    assert 0 < s["get_batch_us"]["p50"] <= s["get_batch_us"]["p99"] <= s["get_batch_us"]["max"]
    assert s["tokens_per_s"] > s["real_tokens_per_s"] > 0 and s["batches_per_s"] > 0
    assert s["decode_threads"] == 1 and s["prefetch_depth"] == 2 and s["prefetch_depth_setting"] == "2"
    assert s["warmup"] == 0 and s["batches_per_s"] * s["seconds"] == pytest.approx(76)
    assert loader.stats("val")["batches"] == 0
    assert loader.config["batch_size"] == "4" and loader.config["dataset_mode"] == "sft_episode"
    assert len(loader.fingerprint) > 0


def test_stats_use_the_names_of_tokenfeed_bench(sft_dir, tmp_path, cli):
    xml = write_config(tmp_path / "c.xml", **base_keys(sft_dir, use_loss_mask=True))
    bench = json.loads(run_cli(cli, "bench", "--config", xml, "--batches", 5, "--warmup", 2, "--json").stdout)
    loader = tokenfeed.Loader(xml)
    for _ in range(5):
        loader.get_batch()
    s = loader.stats()
    # Every figure of bench's JSON but its own run parameters, with the same type.
    assert set(bench) - set(s) == {"config", "consumer_us", "reads"}, set(bench) - set(s)
    for key in set(bench) & set(s):
        assert type(s[key]) is type(bench[key]) or {type(s[key]), type(bench[key])} <= {int, float}, key
    assert set(s["get_batch_us"]) == set(bench["get_batch_us"])
    for key in ("split", "dataset_mode", "batch_size", "block_size", "mask", "prefetch_depth", "prefetch_depth_setting",
                "decode_threads"):
        assert s[key] == bench[key], key
    assert s["batches"] == 5 and bench["batches"] == 5


def test_reset_stats_starts_a_measurement_after_a_warm_up(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    for _ in range(7):
        loader.get_batch()
    loader.get_batch("val")
    loader.reset_stats("train")
    s = loader.stats()
    assert (s["batches"], s["warmup"], s["seconds"], s["batches_per_s"]) == (0, 7, 0, 0)
    assert s["get_batch_us"] == {"p50": 0, "p99": 0, "max": 0, "mean": 0}
    assert loader.stats("val")["batches"] == 1  # another split's measurement goes on
    for _ in range(3):
        loader.get_batch()
    s = loader.stats()
    assert (s["batches"], s["warmup"]) == (3, 7) and s["seconds"] > 0
    assert s["tokens_per_s"] == pytest.approx(s["batches_per_s"] * 4 * 64)
    loader.reset_stats()
    assert loader.stats()["warmup"] == 10 and loader.stats("val")["warmup"] == 1
    with pytest.raises(tokenfeed.UsageError):
        loader.reset_stats("test")


def test_config_from_any_mapping_and_numpy_scalars(sft_dir):
    keys = base_keys(sft_dir, batch_size=np.int32(4))

    class Keys(collections.abc.Mapping):  # a mapping that is no dict
        def __init__(self, d):
            self._d = dict(d)

        def __getitem__(self, k):
            return self._d[k]

        def __iter__(self):
            return iter(self._d)

        def __len__(self):
            return len(self._d)

    for config in (types.MappingProxyType(keys), Keys(keys)):
        loader = tokenfeed.Loader(config, use_loss_mask=np.bool_(True))
        assert loader.config["use_loss_mask"] == "true" and loader.get_batch().mask.shape == (4, 64)
    assert tokenfeed.Loader(keys, use_loss_mask=np.False_).config["use_loss_mask"] == "false"
    assert tokenfeed.Loader(keys, epoch_seed=7.0).config["epoch_seed"] == "7"
    with pytest.raises(tokenfeed.ConfigError, match="whole number"):
        tokenfeed.Loader(keys, epoch_seed=2.5)

    # load_state_dict takes any mapping too, nested ones included.
    loader = tokenfeed.Loader(keys)
    for _ in range(3):
        loader.get_batch()
    state = loader.state_dict()

    def frozen(v):
        return types.MappingProxyType({k: frozen(x) for k, x in v.items()}) if isinstance(v, dict) else v

    other = tokenfeed.Loader(keys)
    other.load_state_dict(frozen(state))
    assert other.state_dict() == state
    other.load_state_dict(Keys(state))
    assert other.state_dict() == state
    with pytest.raises(tokenfeed.StateError):
        other.load_state_dict(dict(state, splits=object()))


def test_special_token_ids_take_keywords():
    s = special_ids()
    assert s.is_role_token(id=SPECIAL["user"]) and not s.is_role_token(id=65)
    assert s.is_special_token(id=SPECIAL["eot"]) and not s.is_special_token(65)


# The package's types (docs/ARCHITECTURE.md): the extension's stub, _tokenfeed.pyi, generated
# from the bindings when the module is built; inline annotations in __init__.py and rl.py.
PACKAGE = Path(tokenfeed.__file__).parent


def _stub():
    return ast.parse((PACKAGE / "_tokenfeed.pyi").read_text())


def _source(name):
    return ast.parse((PACKAGE / name).read_text())


# The package's pure-Python modules: those that define names __init__.py re-exports, then
# the parts of tokenfeed.prepare and tokenfeed.prepare_text (hf_prepare and its modules by job),
# and the modules imported by name (torch, ray).
EXPORTING_MODULES = ("rl", "text_corpus", "_chat", "_prepare", "_torch", "_writer", "_inspection", "_mixing")
OTHER_MODULES = ("_values", "_command", "hf_prepare", "_bad_record", "_hf_tokenizer", "_token_pieces",
                 "_chat_template", "_loss_mask", "_conversation_reader", "_conversation_encoder", "_encode_pool",
                 "torch", "ray")


def _sources(names=EXPORTING_MODULES + OTHER_MODULES):
    return {name: _source(name + ".py") for name in names}


def _unannotated_in(sources):
    return [problem for name, tree in sources.items() for problem in _unannotated(tree, name + ".py")]


# Parameters as (name, kind, has a default), the kinds of inspect.Parameter.
P = inspect.Parameter


def _split_top_level(text, sep):
    """`text` split at `sep` outside brackets and quotes."""
    parts, depth, quote, current = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _nanobind_parameters(func):
    """A nanobind function's parameters, from its __nb_signature__ ('def f(a: T = \\0, *, b) -> R')."""
    (text, _doc, _defaults), = func.__nb_signature__  # one overload
    open_at = text.index("(")
    depth = 0
    for close_at in range(open_at, len(text)):
        depth += {"(": 1, ")": -1}.get(text[close_at], 0)
        if depth == 0:
            break
    params, kind = [], P.POSITIONAL_OR_KEYWORD
    for p in _split_top_level(text[open_at + 1:close_at], ","):
        if p == "/":
            params = [(n, P.POSITIONAL_ONLY, d) for n, _, d in params]
        elif p == "*":
            kind = P.KEYWORD_ONLY
        elif p.startswith("**"):
            params.append((re.match(r"\*\*(\w+)", p).group(1), P.VAR_KEYWORD, False))
        elif p.startswith("*"):
            params.append((re.match(r"\*(\w+)", p).group(1), P.VAR_POSITIONAL, False))
            kind = P.KEYWORD_ONLY
        else:
            params.append((re.match(r"\w+", p).group(0), kind, len(_split_top_level(p, "=")) > 1))
    return params


def _runtime_parameters(func):
    if hasattr(func, "__nb_signature__"):
        return _nanobind_parameters(func)
    return [(p.name, p.kind, p.default is not P.empty) for p in inspect.signature(func).parameters.values()]


def _stub_parameters(fn):
    a = fn.args
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    out = [(arg.arg, P.POSITIONAL_ONLY if i < len(a.posonlyargs) else P.POSITIONAL_OR_KEYWORD, i >= first_default)
           for i, arg in enumerate(positional)]
    if a.vararg:
        out.append((a.vararg.arg, P.VAR_POSITIONAL, False))
    out += [(arg.arg, P.KEYWORD_ONLY, d is not None) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg:
        out.append((a.kwarg.arg, P.VAR_KEYWORD, False))
    return out


def _is_property(fn):
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


_DUNDERS = {"__init__", "__iter__", "__next__", "__len__", "__enter__", "__exit__"}


def _module_names(module):
    """What a stub of `module` declares: every attribute but module dunders, private ones too."""
    return {n for n in vars(module) if not (n.startswith("__") and n.endswith("__")) or n == "__version__"}


def _stub_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _stub_mismatches(tree, module):
    """Every difference between a stub's names, functions, classes and methods and `module`'s."""
    problems = []
    stub_names, runtime_names = _stub_names(tree), _module_names(module)
    if stub_names != runtime_names:
        problems.append(f"names in the stub only: {sorted(stub_names - runtime_names)}, "
                        f"in the module only: {sorted(runtime_names - stub_names)}")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and hasattr(module, node.name):
            stub, runtime = _stub_parameters(node), _runtime_parameters(getattr(module, node.name))
            if stub != runtime:
                problems.append(f"{node.name}: stub {stub} != runtime {runtime}")
        elif isinstance(node, ast.ClassDef) and hasattr(module, node.name):
            cls = getattr(module, node.name)
            if issubclass(cls, BaseException):
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                if bases != [b.__name__ for b in cls.__bases__]:
                    problems.append(f"{node.name}: stub bases {bases} != runtime {[b.__name__ for b in cls.__bases__]}")
                has_kind = any(isinstance(m, ast.AnnAssign) and m.target.id == "kind" for m in node.body)
                if has_kind != ("kind" in vars(cls)):
                    problems.append(f"{node.name}: kind in the stub {has_kind}, at runtime {'kind' in vars(cls)}")
                continue
            declared = set()
            for member in node.body:
                if not isinstance(member, ast.FunctionDef):
                    continue
                declared.add(member.name)
                if not hasattr(cls, member.name):
                    problems.append(f"{node.name}.{member.name}: in the stub only")
                    continue
                attr = inspect.getattr_static(cls, member.name)
                if _is_property(member):
                    if not hasattr(attr, "fget"):
                        problems.append(f"{node.name}.{member.name}: a property in the stub only")
                    continue
                stub, runtime = _stub_parameters(member), _runtime_parameters(getattr(cls, member.name))
                if stub != runtime:
                    problems.append(f"{node.name}.{member.name}: stub {stub} != runtime {runtime}")
            public = {n for n, v in vars(cls).items() if (not n.startswith("_") or n in _DUNDERS)
                      and (callable(v) or hasattr(v, "fget"))}
            if not hasattr(vars(cls).get("__init__"), "__nb_signature__") and "__init__" not in declared:
                public.discard("__init__")  # nanobind's for a class Python cannot construct
                # (Batch, Tokenizer), which raises TypeError
            if public - declared:
                problems.append(f"{node.name}: not in the stub: {sorted(public - declared)}")
    return problems


def _unannotated(tree, where):
    """The public functions and methods of a module's source that lack a parameter's or the
    return's annotation: a type checker reads them without a stub."""
    problems = []

    def check(fn, owner):
        args = fn.args
        params = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
        missing = [a.arg for a in params if a.annotation is None and a.arg not in ("self", "cls")]
        if fn.returns is None:
            missing.append("return")
        if missing:
            problems.append(f"{where}: {owner}{fn.name} has no annotation for {missing}")

    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            check(node, "")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and (not member.name.startswith("_") or member.name in _DUNDERS):
                    check(member, node.name + ".")
    return problems


def _untyped_exports(init, stub, sources):
    """The names of tokenfeed.__all__ that a type checker cannot see: each must be imported
    from ._tokenfeed and declared in its stub, imported from a pure-Python module of the
    package that defines it, or defined in __init__.py."""
    where = {}
    for node in init.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            for alias in node.names:
                where[alias.asname or alias.name] = node.module
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            where[node.name] = "__init__"
    declared = {name: _stub_names(tree) for name, tree in sources.items()}
    declared["_tokenfeed"] = _stub_names(stub)
    declared["__init__"] = {name for name, module in where.items() if module == "__init__"}
    return [f"{name}: from {where.get(name)}, which declares no such name" for name in tokenfeed.__all__
            if name not in declared.get(where.get(name), set())]


def test_stubs_match_the_module():
    assert (PACKAGE / "py.typed").exists()
    # No hand-written stub: __init__.pyi would hide __init__.py's annotations from type
    # checkers, and nothing would hold it to the code.
    assert not (PACKAGE / "__init__.pyi").exists()
    # The generated stub describes this build of the extension: every name, and each
    # function's and method's parameters (names, kinds, which have defaults).
    assert _stub_mismatches(_stub(), tokenfeed._tokenfeed) == []
    # Every exported name is typed: from the stub, or from annotated Python source.
    init, sources = _source("__init__.py"), _sources()
    assert _untyped_exports(init, _stub(), sources) == []
    assert _unannotated(init, "__init__.py") + _unannotated_in(sources) == []
    # Every module of the package is checked: a new one must be added to the lists above.
    assert {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__", "_cli"} == set(sources)
    for name in tokenfeed.__all__:
        assert hasattr(tokenfeed, name), name


def test_the_stub_checks_see_a_drift():
    # The checks above, on a stub whose is_role_token names its parameter differently, whose
    # Loader lacks reset_stats, whose ConfigError is an OSError and which declares a function
    # the module lacks; and on sources with an unannotated parameter and an export defined
    # nowhere: each is reported.
    tree = _stub()
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for member in classes["SpecialTokenIds"].body:
        if isinstance(member, ast.FunctionDef) and member.name == "is_role_token":
            member.args.args[1].arg = "token"
    loader = classes["Loader"]
    loader.body = [m for m in loader.body if not (isinstance(m, ast.FunctionDef) and m.name == "reset_stats")]
    classes["ConfigError"].bases[1].id = "OSError"
    tree.body.append(ast.parse("def gone() -> None: ...").body[0])
    problems = _stub_mismatches(tree, tokenfeed._tokenfeed)
    assert any(p.startswith("SpecialTokenIds.is_role_token") for p in problems), problems
    assert "Loader: not in the stub: ['reset_stats']" in problems, problems
    assert any(p.startswith("ConfigError: stub bases") for p in problems), problems
    assert any(p.startswith("names in the stub only: ['gone']") for p in problems), problems
    assert len(problems) == 4, problems

    init, sources = _source("__init__.py"), _sources()
    for node in sources["_chat"].body:
        if isinstance(node, ast.FunctionDef) and node.name == "plan_sft_window":
            node.args.args[1].annotation = None
    for node in sources["_torch"].body:
        if isinstance(node, ast.FunctionDef) and node.name == "to_torch":
            node.name = "to_tensor"  # __all__'s to_torch is then defined nowhere
    assert _unannotated_in(sources) == ["_chat.py: plan_sft_window has no annotation for ['S']"]
    assert _untyped_exports(init, _stub(), sources) == [
        "to_torch: from _torch, which declares no such name"]


def test_use_loss_mask_defaults_to_auto(sft_dir, tmp_path):
    # A dataset with mask.bin: the mask is on without being asked for, from a dict or an XML
    # file, so an SFT run does not train on its prompts by default.
    loader = tokenfeed.Loader(base_keys(sft_dir))
    assert loader.config["use_loss_mask"] == "true"
    assert loader.get_batch().mask.shape == (4, 64)
    xml = write_config(tmp_path / "auto.xml", **base_keys(sft_dir, use_loss_mask="auto"))
    assert tokenfeed.Loader(xml).get_batch().mask.shape == (4, 64)
    # An explicit false still turns it off.
    off = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=False))
    assert off.config["use_loss_mask"] == "false" and off.get_batch().mask.size == 0
    with pytest.raises(tokenfeed.ConfigError, match="expected auto, true or false"):
        tokenfeed.Loader(base_keys(sft_dir, use_loss_mask="maybe"))
