"""Chat conversations for supervised fine-tuning: templates, assistant spans, validation.

``template`` renders a conversation with a chat template as transformers renders it (a
sandboxed Jinja environment with its filters and globals) and reports the ``{% generation %}``
spans; ``spans`` finds the assistant spans (from those tags, or by diffing rendered prefixes)
and turns them into per-token masks; ``conversations`` reads and checks the records.
``zephon.ops.tokenize_chat`` is the operator built from them. Rendering needs ``jinja2``
(the ``chat`` extra).
"""
