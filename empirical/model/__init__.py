"""The model wing: a model in memory, the text it reads, and its captured, validated q/k.

- ``loaded``, ``loading``, ``converted``: the :class:`LoadedModel` record and every source a
  model loads from (the embedded GGUF, a folder or id, a config, a module in memory);
- ``inputs``, ``passes``: ids and positions checked for a forward pass; the passes and losses;
- ``text``, ``corpus``: the default text, a user's file, and corpora of passages;
- ``capture``, ``validate``, ``geometry``, ``memory``: pre-RoPE q/k taken where the model
  rotates, each layer rebuilt from them and checked, the frequencies read off the applied
  tables, the memory a streamed capture watches.

May import: the adapter (``empirical.adapter``, the one seam with transformers) and itself.
"""
