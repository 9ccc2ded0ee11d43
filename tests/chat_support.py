"""Chat tokenizers, templates and conversations for the tokenize_chat tests (all built here:
nothing is downloaded)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from zephon import synthetic

# ChatML as Qwen2.5 writes it (system prompt with the tool list, tool calls, tool responses
# as user turns), with {% generation %} around what the assistant generates
CHATML_TAGGED = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- '\\n\\n# Tools\\n\\n<tools>' }}
    {%- for tool in tools %}
        {{- '\\n' }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- '\\n</tools><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' %}
        {%- if not loop.first %}{{ raise_exception('the system message must come first') }}{% endif %}
    {%- elif message.role == 'user' %}
        {{- '<|im_start|>user\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\\n' }}
        {%- generation %}
        {%- if message.content is defined %}{{- message.content }}{%- endif %}
        {%- for call in message.tool_calls | default([]) %}
            {{- '\\n<tool_call>\\n{"name": "' + call.function.name + '", "arguments": ' }}
            {%- if call.function.arguments is string %}{{- call.function.arguments }}
            {%- else %}{{- call.function.arguments | tojson }}{%- endif %}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>' }}
        {%- endgeneration %}
        {{- '\\n' }}
    {%- elif message.role == 'tool' %}
        {{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""
CHATML_PLAIN = CHATML_TAGGED.replace("{%- generation %}", "").replace("{%- endgeneration %}", "")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
WORDS = ["hello", "world", "the", "cat", "sat", "on", "a", "mat", "naïve", "café", "日本語",
         "données", "🙂", "x=1", "def", "f(x):", "return", "42", "ünïcode", "tab\there",
         "Ω", "über", "😀😀", "...", "?", "-", "\"quoted\""]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                           "parameters": {"type": "object", "properties": {
                                               "city": {"type": "string"}}}}},
         {"type": "function", "function": {"name": "add", "description": "Adds two numbers",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "number"},
                                               "b": {"type": "number"}}}}}]


def train_chat_tokenizer(vocab_size: int = 1024, trim_offsets: bool = False):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if trim_offsets:
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    texts = synthetic.documents(300, seed=5, mean_words=60) + [" ".join(WORDS)] * 20
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def write_tokenizer_dir(directory: Path, template: str | None = CHATML_TAGGED,
                        trim_offsets: bool = False) -> str:
    """A Hugging Face tokenizer directory: tokenizer.json and tokenizer_config.json (ChatML
    tokens: EOS <|im_end|>, PAD <|endoftext|>, no BOS) with ``template``."""
    directory.mkdir(parents=True, exist_ok=True)
    train_chat_tokenizer(trim_offsets=trim_offsets).save(str(directory / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
              "pad_token": "<|endoftext|>", "bos_token": None, "model_max_length": 1 << 20}
    if template is not None:
        config["chat_template"] = template
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return str(directory)


def _text(rng: random.Random) -> str:
    n = rng.choice([0, 1, 2, 5, 12, 30])
    words = [rng.choice(WORDS) for _ in range(n)]
    seps = [rng.choice([" ", " ", " ", "\n", "  ", "\n\n", ""]) for _ in range(n)]
    text = "".join(w + s for w, s in zip(words, seps))
    return rng.choice(["", " ", "\n"]) + text if rng.random() < 0.2 else text


def _tool_call(rng: random.Random) -> dict:
    if rng.random() < 0.5:
        return {"type": "function", "function": {"name": "get_weather",
                                                 "arguments": json.dumps({"city": _text(rng)})}}
    return {"type": "function", "function": {"name": "add", "arguments": json.dumps(
        {"a": rng.randint(0, 99), "b": rng.randint(0, 99)})}}


def conversation(rng: random.Random) -> dict:
    """A record: messages (system prompt sometimes, 1-4 exchanges, tool calls, empty and
    whitespace-edged turns, unicode) and sometimes tools (a JSON text)."""
    messages = []
    tools = rng.random() < 0.3
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": _text(rng)})
    for _ in range(rng.randint(1, 4)):
        messages.append({"role": "user", "content": _text(rng)})
        if tools and rng.random() < 0.5:
            calls = [_tool_call(rng) for _ in range(rng.randint(1, 2))]
            call = {"role": "assistant", "tool_calls": calls}
            if rng.random() < 0.5:
                call["content"] = _text(rng)
            messages.append(call)
            for _ in calls:
                messages.append({"role": "tool", "content": _text(rng)})
        messages.append({"role": "assistant", "content": "" if rng.random() < 0.1 else _text(rng)})
    record = {"messages": messages}
    if tools:
        # as datasets store them: Arrow would give each schema the other schemas' keys as nulls
        record["tools"] = json.dumps(TOOLS)
    return record


def conversations(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [conversation(rng) for _ in range(n)]


def write_chat_dataset(root: Path, name: str, records: list[dict], shards: int = 3,
                       fmt: str = "jsonl") -> str:
    """``records`` as shard files of ``fmt`` under root/name; each record also gets its index
    under ``k``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(root) / name
    out.mkdir(parents=True, exist_ok=True)
    for s, idx in enumerate(np.array_split(np.arange(len(records)), shards)):
        rows = [{**records[i], "k": int(i)} for i in idx]
        path = out / f"shard-{s:05d}.{fmt}"
        if fmt == "jsonl":
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                            encoding="utf-8")
        else:
            pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=64)
    return str(out)
