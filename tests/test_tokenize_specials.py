"""Special tokens follow the tokenizer (BOS and EOS where it has them), settled when the pipeline
is built; Hugging Face tokenizer directories are read the way transformers reads them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from zephon import Pipeline, synthetic
from zephon.engine.plan.checkpoint_view import fingerprint as spec_fingerprint
from zephon.io import Dataset, InMemoryShard
from zephon.work import StaticMixtureWorkSource

pytest.importorskip("tokenizers")
PRETRAINING_GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "pretraining.md"
TEXTS = synthetic.documents(12, seed=4, mean_words=10)


def fingerprint(pipeline):
    """The fingerprint a checkpoint of ``pipeline`` carries (of the spec it runs)."""
    return spec_fingerprint(pipeline._spec())


def _train(path: Path, specials: list[str], template: str | None = None) -> str:
    """A small byte-level BPE with the given special tokens (ids 0, 1, ... in that order)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(synthetic.documents(100, seed=9, mean_words=40), trainer=trainer)
    if template is not None:
        names = re.findall(r"<\|\w+\|>", template)
        tok.post_processor = processors.TemplateProcessing(
            single=template, special_tokens=[(n, tok.token_to_id(n)) for n in names])
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return str(path)


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    root = tmp_path_factory.mktemp("toks")
    return {
        "eos_only": _train(root / "eos_only.json", ["<|endoftext|>"]),  # GPT-2 style
        "bos_only": _train(root / "bos_only.json", ["<s>"]),
        "both": _train(root / "both.json", ["<pad>", "<s>", "</s>"]),
        "neither": _train(root / "neither.json", ["<unk>"]),
        # names no list knows: only the post-processor's template says which is which
        "template": _train(root / "template.json", ["<|go|>", "<|stop|>"],
                           template="<|go|> $A <|stop|>"),
        "plain": _train(root / "plain.json", ["<|doc|>", "<|blank|>"]),
    }


def _pipe(texts=TEXTS):
    ds = Dataset.from_dict("d", {0: InMemoryShard([{"text": t} for t in texts])})
    ws = StaticMixtureWorkSource([ds], {"d": 1.0}, chunk_size=8, seed=1, shuffle_shards=False)
    return Pipeline(ws).options(num_workers=0)


def _rows(p) -> list[list[int]]:
    return [list(r.payload["input_ids"]) for r in p]


def _ids(path: str, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path).encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("kind,first,last", [("eos_only", None, 0), ("bos_only", 0, None),
                                             ("both", 1, 2), ("template", 0, 1)])
def test_default_adds_the_markers_the_tokenizer_has(toks, kind, first, last):
    rows = _rows(_pipe().tokenize(tokenizer=toks[kind], field="text"))
    assert len(rows) == len(TEXTS)
    body = {tuple(_ids(toks[kind], t)) for t in TEXTS}
    for r in rows:
        inner = r[(first is not None):len(r) - (last is not None)]
        assert tuple(inner) in body
        if first is not None:
            assert r[0] == first
        if last is not None:
            assert r[-1] == last


def test_a_tokenizer_without_markers_is_refused_when_built(toks):
    with pytest.raises(ValueError, match=r"neither a BOS nor an EOS.*eos_token_id=.*'none'"):
        _pipe().tokenize(tokenizer=toks["neither"], field="text")
    rows = _rows(_pipe().tokenize(tokenizer=toks["neither"], field="text", special_tokens="none"))
    assert sorted(map(tuple, rows)) == sorted(tuple(_ids(toks["neither"], t)) for t in TEXTS)
    rows = _rows(_pipe().tokenize(tokenizer=toks["neither"], field="text", eos_token_id=0))
    assert all(r[-1] == 0 and r[0] != 0 for r in rows)


def test_an_explicit_request_the_tokenizer_cannot_honour_fails_when_built(toks):
    with pytest.raises(ValueError, match=r"no BOS token: pass bos_token_id= or special_tokens='eos'"):
        _pipe().tokenize(tokenizer=toks["eos_only"], field="text", special_tokens="bos")
    with pytest.raises(ValueError, match=r"no EOS token: pass eos_token_id= or special_tokens='bos'"):
        _pipe().tokenize(tokenizer=toks["bos_only"], field="text", special_tokens="eos")
    # given ids are honoured as asked
    rows = _rows(_pipe().tokenize(tokenizer=toks["eos_only"], field="text",
                                  special_tokens="bos", bos_token_id=7))
    assert all(r[0] == 7 and r[-1] != 0 for r in rows)
    rows = _rows(_pipe().tokenize(tokenizer=toks["eos_only"], field="text", bos_token_id=7))
    assert all(r[0] == 7 and r[-1] == 0 for r in rows)


def test_the_guides_pretraining_pipeline_runs_with_an_eos_only_tokenizer(toks, corpus_dir,
                                                                          monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("ZEPHON_NUM_WORKERS", "0")
    section = PRETRAINING_GUIDE.read_text().split("## The pipeline", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    code = (code.replace('"/data/code"', repr(str(corpus_dir / "code")))
            .replace('"/data/web"', repr(str(corpus_dir / "web")))
            .replace('"path/to/tokenizer.json"', repr(toks["eos_only"])))
    namespace: dict = {}
    # what the guide goes on to say: a checkpoint, taken where the training step is
    code = code.replace("pipeline.close()", "state = pipeline.checkpoint()\npipeline.close()")
    exec(compile(code, str(PRETRAINING_GUIDE), "exec"), namespace)
    assert namespace["step"] == 3 and namespace["state"]["format"] == "zephon-checkpoint"
    ids = namespace["inputs"]["input_ids"]
    assert int((ids == 0).sum()) > 0  # documents end with <|endoftext|>


# -- Hugging Face tokenizer directories ----------------------------------------------------------

def _directory(root: Path, toks, config: dict | None, special_map: dict | None) -> str:
    root.mkdir(parents=True)
    (root / "tokenizer.json").write_text(Path(toks["plain"]).read_text())
    if config is not None:
        (root / "tokenizer_config.json").write_text(json.dumps(config))
    if special_map is not None:
        (root / "special_tokens_map.json").write_text(json.dumps(special_map))
    return str(root)


def _added(content: str) -> dict:
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": True, "__type": "AddedToken"}


def test_gpt2_layout_directory_declares_bos_and_eos_in_its_jsons(toks, tmp_path):
    # GPT-2: one token declared as BOS, EOS and UNK, only in the JSON files, as AddedToken dicts
    d = _directory(tmp_path / "gpt2", toks, {"model_max_length": 1024, "bos_token": _added("<|doc|>"),
                                             "eos_token": _added("<|doc|>")},
                   {"bos_token": "<|doc|>", "eos_token": _added("<|doc|>"),
                    "unk_token": "<|doc|>"})
    for kw in ({"tokenizer": d}, {"tokenizer_id": d}):
        op_rows = _rows(_pipe().tokenize(field="text", **kw))
        assert all(r[-1] == 0 and 0 not in r[:-1] for r in op_rows)  # one separator, at the end
    # the ids and the pad id (EOS: GPT-2 declares no PAD) are part of the fingerprint
    fp = fingerprint(_pipe().tokenize(tokenizer=d, field="text"))["operators"][0]
    assert (fp["bos_id"], fp["eos_id"], fp["pad_id"]) == (None, 0, 0)
    # the same tokenizer.json alone knows no such names
    with pytest.raises(ValueError, match="neither a BOS nor an EOS"):
        _pipe().tokenize(tokenizer=toks["plain"], field="text")


def test_directory_special_tokens_map_alone_and_config_precedence(toks, tmp_path):
    only_map = _directory(tmp_path / "map", toks, None,
                          {"bos_token": "<|blank|>", "eos_token": _added("<|doc|>")})
    rows = _rows(_pipe().tokenize(tokenizer=only_map, field="text"))
    assert all(r[0] == 1 and r[-1] == 0 for r in rows)
    # legacy config (no added_tokens_decoder): special_tokens_map.json overrides it
    legacy = _directory(tmp_path / "legacy", toks, {"bos_token": "<|doc|>", "eos_token": "<|doc|>"},
                        {"eos_token": "<|blank|>"})
    rows = _rows(_pipe().tokenize(tokenizer=legacy, field="text"))
    assert all(r[0] == 0 and r[-1] == 1 for r in rows)
    # current config (added_tokens_decoder): transformers ignores the map
    current = _directory(tmp_path / "current", toks,
                         {"added_tokens_decoder": {"0": _added("<|doc|>"), "1": _added("<|blank|>")},
                          "bos_token": "<|blank|>", "eos_token": "<|doc|>", "pad_token": None},
                         {"bos_token": "<|doc|>", "eos_token": "<|blank|>"})
    rows = _rows(_pipe().tokenize(tokenizer=current, field="text"))
    assert all(r[0] == 1 and r[-1] == 0 for r in rows)


def test_a_declared_token_missing_from_the_vocabulary_is_added_like_transformers(toks, tmp_path):
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(toks["plain"]).get_vocab_size(with_added_tokens=True)
    d = _directory(tmp_path / "new", toks, {"eos_token": "<|doc|>", "pad_token": "<|newpad|>"}, None)
    p = _pipe().tokenize(tokenizer=d, field="text", max_length=256, padding="max_length")
    assert fingerprint(p)["operators"][0]["pad_id"] == vocab  # the next id, as transformers gives
    rows = _rows(p)
    assert all(len(r) == 256 and r[-1] == vocab for r in rows)


def test_tokenizer_id_finds_a_cached_hub_directory(toks, tmp_path, monkeypatch):
    snap = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    _directory(snap, toks, {"eos_token": "<|doc|>"}, None)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    rows = _rows(_pipe().tokenize(tokenizer_id="org/tiny", field="text"))
    assert all(r[-1] == 0 for r in rows)


class _FastTokenizerLike:
    """What the op reads from a transformers fast tokenizer: its backend and its ids."""

    def __init__(self, path: str, bos, eos, pad) -> None:
        from tokenizers import Tokenizer

        self.backend_tokenizer = Tokenizer.from_file(path)
        self.bos_token_id, self.eos_token_id, self.pad_token_id = bos, eos, pad


def test_a_transformers_tokenizer_declaration_is_complete(toks):
    # "<s>" is in the vocabulary, but the object says it has no BOS: only EOS is added
    obj = _FastTokenizerLike(toks["both"], None, 2, None)
    rows = _rows(_pipe().tokenize(tokenizer=obj, field="text"))
    assert all(r[0] != 1 and r[-1] == 2 for r in rows)


def test_tokenizer_json_truncation_settings_do_not_cut_documents(toks, tmp_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(toks["both"])
    tok.enable_truncation(max_length=3)
    path = tmp_path / "truncating.json"
    tok.save(str(path))
    rows = _rows(_pipe().tokenize(tokenizer=str(path), field="text"))
    assert sorted(len(r) for r in rows) == sorted(len(_ids(toks["both"], t)) + 2 for t in TEXTS)
