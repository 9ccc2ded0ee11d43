"""tokenize_chat in pipelines: bad conversations named or counted, max_length policies, span
sources refused while the pipeline is built, template variables, the fallback tokenizer."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("jinja2")
pytest.importorskip("tokenizers")

from tests.chat_support import CHATML_PLAIN, conversations, write_tokenizer_dir  # noqa: E402
from zephon import Pipeline  # noqa: E402
from zephon.io import DataError, Dataset, InMemoryShard  # noqa: E402
from zephon.work import StaticMixtureWorkSource  # noqa: E402

GOOD = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]


@pytest.fixture(scope="module")
def chatml(tmp_path_factory):
    return write_tokenizer_dir(tmp_path_factory.mktemp("chatml") / "tok")


def _jsonl(tmp_path, rows, name="chat"):
    d = tmp_path / name
    d.mkdir()
    (d / "shard-00000.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return Dataset.from_path(name, str(d))


def _pipe(datasets, **opts):
    ws = StaticMixtureWorkSource(datasets, {d.name: 1.0 for d in datasets}, chunk_size=8,
                                 seed=1, shuffle_shards=False)
    return Pipeline(ws).options(num_workers=0, **opts)


def _losses(p) -> dict:
    return p.metrics_snapshot()["losses"]["by_dataset"]


BAD = {
    "missing field": ({"other": 1}, "field 'messages' is missing"),
    "not a list": ({"messages": "hello"}, "holds a string, not a list of messages"),
    "no messages": ({"messages": []}, "holds no messages"),
    "no role": ({"messages": [{"content": "x"}]}, "message 0 has no role"),
    "unknown role": ({"messages": [{"role": "robot", "content": "x"}]},
                     "message 0 has an unknown role 'robot'"),
    "content not text": ({"messages": [{"role": "user", "content": [{"type": "text"}]}]},
                         "message 0 (user) holds list content, not text"),
    "no content": ({"messages": [{"role": "user"}]}, "message 0 (user) has no content"),
    "message not an object": ({"messages": ["hi"]}, "message 0 is a str"),
    "tools not a list": ({"messages": GOOD, "tools": 3}, "field 'tools' must hold a list"),
    "template refuses": ({"messages": GOOD + [{"role": "system", "content": "late"}]},
                         "the system message must come first"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_conversation_names_dataset_shard_and_row(tmp_path, chatml, case):
    record, message = BAD[case]
    ds = _jsonl(tmp_path, [{"messages": GOOD}] * 3 + [record] + [{"messages": GOOD}])
    p = _pipe([ds]).tokenize_chat(chatml)
    with pytest.raises(DataError) as err:
        list(p)
    assert message in str(err.value)
    assert err.value.dataset == "chat" and err.value.row == 4
    assert err.value.shard.endswith("shard-00000.jsonl")
    assert "on_bad_record='skip'" in str(err.value)


def test_bad_conversations_skipped_are_counted(tmp_path, chatml):
    rows = [{"messages": GOOD}] * 3 + [BAD[c][0] for c in sorted(BAD)]
    p = _pipe([_jsonl(tmp_path, rows)]).tokenize_chat(chatml, on_bad_record="skip")
    with pytest.warns(RuntimeWarning, match="bad_record"):
        out = list(p)
    assert len(out) == 3
    assert _losses(p)["chat"]["bad_record"]["records"] == len(BAD)


def test_oversized_conversations_raise_by_default_else_truncate_or_drop_counted(tmp_path,
                                                                                chatml):
    recs = conversations(40, seed=3)
    ds = _jsonl(tmp_path, recs)
    full = {r.meta.sample_id: r.payload for r in _pipe([ds]).tokenize_chat(chatml)}
    lengths = sorted(len(v["input_ids"]) for v in full.values())
    cap = lengths[len(lengths) // 2]
    over = {k: v for k, v in full.items() if len(v["input_ids"]) > cap}
    with pytest.raises(DataError, match=f"longer than max_length={cap}.*oversized='truncate'"):
        list(_pipe([ds]).tokenize_chat(chatml, max_length=cap))

    p = _pipe([ds]).tokenize_chat(chatml, max_length=cap, oversized="truncate")
    with pytest.warns(RuntimeWarning, match="truncated"):
        cut = {r.meta.sample_id: r.payload for r in p}
    assert cut.keys() == full.keys()
    for k, v in cut.items():  # a prefix of the whole, ids and mask alike
        assert v["input_ids"] == full[k]["input_ids"][:cap]
        assert v["loss_mask"] == full[k]["loss_mask"][:cap]
    lost = _losses(p)["chat"]["truncated"]
    assert lost["records"] == len(over)
    assert lost["tokens"] == sum(len(v["input_ids"]) - cap for v in over.values())

    p = _pipe([ds]).tokenize_chat(chatml, max_length=cap, oversized="drop")
    with pytest.warns(RuntimeWarning, match="oversized"):
        kept = {r.meta.sample_id for r in p}
    assert kept == full.keys() - over.keys()
    lost = _losses(p)["chat"]["oversized"]
    assert lost == {"records": len(over), "operators": ["tokenize_chat"],
                    "tokens": sum(len(v["input_ids"]) for v in over.values())}


def test_span_sources_the_template_cannot_serve_are_refused_when_built(tmp_path, chatml):
    ds = _jsonl(tmp_path, [{"messages": GOOD}])
    with pytest.raises(ValueError, match="no {% generation %} tags"):
        _pipe([ds]).tokenize_chat(chatml, chat_template=CHATML_PLAIN,
                                  span_source="generation_tags")
    # the last turn rendered unlike the others: prefixes are not prefixes of the whole
    unstable = ("{% for m in messages %}{{ m.role }}: {{ m.content }}"
                "{% if loop.last %}<|im_end|>{% else %}\n{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(ValueError, match="does not render the conversation up to message"):
        _pipe([ds]).tokenize_chat(chatml, chat_template=unstable)
    with pytest.raises(ValueError, match="does not compile"):
        _pipe([ds]).tokenize_chat(chatml, chat_template="{% for m in messages %}")
    bare = write_tokenizer_dir(tmp_path / "bare", template=None)
    with pytest.raises(ValueError, match="has no chat template: pass chat_template="):
        _pipe([ds]).tokenize_chat(bare)
    with pytest.raises(ValueError, match="neither a Jinja template, a file"):
        _pipe([ds]).tokenize_chat(chatml, chat_template="no-such-template")


def test_spans_inside_tokens_are_refused_or_counted_never_guessed(tmp_path, chatml):
    """Without tags, a generation prompt that ends in a space leaves the space and the
    answer's first word in one token: no mask would be right."""
    template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                "{% if add_generation_prompt %}assistant: {% endif %}")
    rows = [{"messages": [{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "the end"}]},
            {"messages": [{"role": "user", "content": "Hi"},
                          {"role": "assistant", "content": "\nok"}]}]
    ds = _jsonl(tmp_path, rows)
    with pytest.raises(DataError, match="span boundaries fall inside tokens") as err:
        list(_pipe([ds]).tokenize_chat(chatml, chat_template=template))
    assert err.value.row == 1
    p = _pipe([ds]).tokenize_chat(chatml, chat_template=template, on_bad_record="skip",
                                  preserve_upstream_payload=True)
    with pytest.warns(RuntimeWarning, match="unmaskable"):
        out = list(p)
    assert [r.meta.sample_id[2] for r in out] == [1]  # its answer starts after the space
    assert _losses(p)["chat"]["unmaskable"]["records"] == 1


def test_template_variables_tools_thinking_and_a_fixed_clock():
    template = ("{{ bos_token }}{% if enable_thinking %}<think>{% endif %}"
                "{{ strftime_now('%Y-%m-%d') }}|{{ tools | tojson }}|{{ messages[0].content }}"
                "{% generation %}{{ messages[1].content }}{{ eos_token }}{% endgeneration %}")
    rows = [{"messages": GOOD, "enable_thinking": True, "tools": [{"name": "f"}]},
            {"messages": GOOD}]
    ds = Dataset.from_dict("d", {0: InMemoryShard(rows)})

    def texts(**kw):
        p = _pipe([ds]).tokenize_chat("__fallback__", chat_template=template, **kw)
        out = {}
        for r in p:
            ids = np.asarray(r.payload["input_ids"]) - 4
            mask = np.asarray(r.payload["loss_mask"], dtype=bool)
            out[r.meta.sample_id[2]] = (bytes(ids[ids >= 0].astype(np.uint8)).decode(),
                                        bytes(ids[mask].astype(np.uint8)).decode())
        return out

    got = texts()
    # specials of the fallback tokenizer are plain text to it (it has no added tokens)
    assert got[0] == ('<s><think>2024-01-01|[{"name": "f"}]|HiHello.</s>', "Hello.</s>")
    assert got[1] == ("<s>2024-01-01|null|HiHello.</s>", "Hello.</s>")
    got = texts(chat_template_kwargs={"strftime_now": "2025-06-30T09:00", "bos_token": "["},
                eos_token="<end>")
    assert got[1] == ("[2025-06-30|null|HiHello.<end>", "Hello.<end>")


def test_checkpoints_of_another_template_are_refused(tmp_path, chatml):
    ds = _jsonl(tmp_path, [{"messages": GOOD}] * 20)
    p = _pipe([ds]).tokenize_chat(chatml).batch(microbatch_size=2)
    it = iter(p)
    next(it)
    state = p.checkpoint()
    p.close()
    other = _pipe([ds]).tokenize_chat(chatml, chat_template=CHATML_PLAIN).batch(microbatch_size=2)
    with pytest.raises(RuntimeError, match="does not match"):
        other.restore(state)
    assert len(json.dumps(state)) < 4000  # the template is named by its digest


def test_tokenize_chat_names_its_parameters():
    with pytest.raises(ValueError, match="span_source"):
        _pipe([Dataset.from_dict("d", {0: InMemoryShard([{"messages": GOOD}])})]).tokenize_chat(
            "__fallback__", chat_template="{{ messages }}", span_source="tags")
    with pytest.raises(ValueError, match="loss_on_last_turn_only=True is loss_scope='last_span'"):
        _pipe([Dataset.from_dict("d", {0: InMemoryShard([{"messages": GOOD}])})]).tokenize_chat(
            "__fallback__", chat_template="{{ messages }}", loss_on_last_turn_only=True,
            loss_scope="after_last_user")
    with pytest.raises(ValueError, match="oversized must be"):
        _pipe([Dataset.from_dict("d", {0: InMemoryShard([{"messages": GOOD}])})]).tokenize_chat(
            "__fallback__", chat_template="{{ messages }}", oversized="split")
