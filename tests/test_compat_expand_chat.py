"""expand_chat (reference addendum A.2): one record per answered user query, lineage that
makes checkpoints exact, drops counted, malformed conversations named by dataset/shard/row."""

from __future__ import annotations

import json

import pytest

from zephon import Pipeline
from zephon.io import DataError, Dataset, InMemoryShard
from zephon.ops.expand_chat import ConversationTypeError, ExpandChatOp
from zephon.work import StaticMixtureWorkSource

pytestmark = pytest.mark.filterwarnings("ignore:zephon. operator expand_chat:RuntimeWarning")


def conv(roles: str, conv_id: int) -> dict:
    """``roles`` like "S U A T A": one message per letter."""
    names = {"S": "system", "U": "user", "A": "assistant", "T": "tool"}
    return {"id": conv_id, "messages": [{"role": names[r], "content": f"{r}{i}"}
                                        for i, r in enumerate(roles.split())]}


CONVERSATIONS = [conv("S U A T A U A U", 0), conv("U A", 1), conv("U", 2), conv("U A U", 3),
                 conv("U A U U A", 4), conv("U U A", 5), conv("S", 6)]


def contents(payload: dict) -> str:
    return " ".join(m["content"] for m in payload["messages"])


def write_jsonl(root, rows: list[dict], shards: int = 2) -> str:
    root.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // shards)
    for s in range(shards):
        with open(root / f"part-{s:05d}.jsonl", "w") as f:
            for r in rows[s * per:(s + 1) * per]:
                f.write(json.dumps(r) + "\n")
    return str(root)


def pipeline(ds: Dataset, workers: int = 0, chunk: int = 4, **kw) -> Pipeline:
    ws = StaticMixtureWorkSource([ds], {ds.name: 1.0}, chunk_size=chunk, seed=0,
                                 shuffle_shards=False)
    return Pipeline(ws).options(num_workers=workers, micro_batch_size=3).expand_chat(**kw)


def in_memory(rows: list[dict]) -> Dataset:
    return Dataset.from_dict("chat", {0: InMemoryShard(rows)})


def test_one_record_per_answered_query_with_its_history():
    out = [(r.meta.sample_id[2], r.meta.lineage, contents(r.payload), r.payload["id"])
           for r in pipeline(in_memory(CONVERSATIONS))]
    assert out == [
        (0, (0,), "S0 U1 A2 T3 A4", 0),              # query 0 ends where U5 begins
        (0, (1,), "S0 U1 A2 T3 A4 U5 A6", 0),        # query 1; U7 is unanswered
        (1, (), "U0 A1", 1),                         # one answer: the record itself
        (3, (), "U0 A1", 3),                         # trailing unanswered turn trimmed
        (4, (0,), "U0 A1", 4),                       # queries 0 and 2 answered: a gap at 1
        (4, (2,), "U0 A1 U2 U3 A4", 4),
        (5, (), "U0 U1 A2", 5),                      # query 1 answered, query 0 is not
    ]


def test_drops_and_trims_are_counted():
    p = pipeline(in_memory(CONVERSATIONS))
    list(p)
    losses = p.metrics_snapshot()["losses"]["by_dataset"]["chat"]
    assert losses["no_answer"]["records"] == 2            # rows 2 and 6
    assert losses["unanswered_turns"]["records"] == 2     # rows 0 and 3


class Opaque:  # not an Arrow value: the payloads stay Python objects
    def __eq__(self, other):
        return isinstance(other, Opaque)


def test_columnar_and_per_record_paths_agree(tmp_path):
    path = write_jsonl(tmp_path / "chat", CONVERSATIONS)
    columnar = [(r.meta.sample_id[2], r.meta.lineage, contents(r.payload))
                for r in pipeline(Dataset.from_path("chat", path))]
    rows = [{**c, "opaque": Opaque()} for c in CONVERSATIONS]
    objects = [(r.meta.sample_id[2], r.meta.lineage, contents(r.payload))
               for r in pipeline(Dataset.from_dict("chat", {0: InMemoryShard(rows[:4]),
                                                            1: InMemoryShard(rows[4:])}))]
    assert columnar == objects and len(columnar) == 7


def test_a_nested_field_path():
    rows = [{"chat": {"messages": c["messages"], "lang": "en"}, "id": c["id"]}
            for c in CONVERSATIONS]
    out = [r.payload for r in pipeline(in_memory(rows), field="chat.messages")]
    assert [contents(p["chat"]) for p in out][:2] == ["S0 U1 A2 T3 A4", "S0 U1 A2 T3 A4 U5 A6"]
    assert all(p["chat"]["lang"] == "en" for p in out)
    with pytest.raises(ValueError, match="empty path segment"):
        pipeline(in_memory(rows), field="chat..messages")


@pytest.mark.parametrize("workers", [0, 2])
def test_checkpoint_restores_children_exactly(tmp_path, workers):
    rows = [conv("U A " * (1 + i % 3) + ("U" if i % 2 else ""), i) for i in range(60)]
    ds = Dataset.from_path("chat", write_jsonl(tmp_path / "chat", rows, shards=3))

    def build():
        return (pipeline(ds, workers=workers, chunk=8).shuffle(buffer_size=7, seed=3)
                .batch(5, drop_last=False))

    def sig(b):
        return [(r.meta.sample_id, r.meta.lineage, contents(r.payload)) for r in b.records]

    full = [sig(b) for b in build()]
    assert sum(len(b) for b in full) == sum(1 + i % 3 for i in range(60))
    p = build()
    it = iter(p)
    head = [sig(next(it)) for _ in range(9)]
    state = json.loads(json.dumps(p.checkpoint()))
    p.close()
    assert head + [sig(b) for b in build().restore(state)] == full


@pytest.mark.parametrize("bad, error, words", [
    ({"id": 9}, DataError, "field 'messages' is missing"),
    ({"id": 9, "messages": "hello"}, ConversationTypeError, "not a list of messages"),
    ({"id": 9, "messages": [{"role": "user", "content": "x"}, {"content": "y"}]}, DataError,
     "message 1 has no non-empty string role"),
    ({"id": 9, "messages": [{"role": "", "content": "x"}]}, DataError, "message 0"),
])
@pytest.mark.parametrize("columnar", [True, False])
def test_malformed_conversations_name_dataset_shard_and_row(tmp_path, bad, error, words,
                                                           columnar):
    rows = [conv("U A", 0), conv("U A", 1), bad, conv("U A", 3)]
    if columnar:
        ds = Dataset.from_path("chat", write_jsonl(tmp_path / "chat", rows, shards=1))
    else:
        ds = in_memory([{**r, "opaque": Opaque()} for r in rows])
    with pytest.raises(error, match=words) as info:
        list(pipeline(ds))
    assert info.value.dataset == "chat" and info.value.row == 3, str(info.value)
    assert info.value.shard is not None
    if columnar:
        assert "part-00000.jsonl" in str(info.value)


def test_traits_match_the_reference():
    t = ExpandChatOp([]).traits()
    assert t.preserves_cursor_order and not t.indexable and t.parallelism == 4
    assert t.calibration_replayable
