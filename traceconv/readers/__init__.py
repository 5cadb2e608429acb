"""The readers: one module per input format, each ``read(source) -> Trace`` and ``sniff(head) -> bool``
(see :mod:`traceconv.formats`, the registry that names them).

* :mod:`.chrome`: the Chrome Trace Event JSON reader and its dialects (Kineto, Composer, MXNet,
  MegEngine timelines), each a delta on the generic reader;
* :mod:`.aggregate`: the aggregate formats (ML-Agents timers, Sample Factory logs, MXNet stats),
  whose totals are laid out as a synthesized timeline by :mod:`.aggregate.synth`;
* :mod:`.megengine_static`: MegEngine's static-graph profile.

The schemas of each format's structure sit beside its reader (``*_schema.py``, ``schema.py``): pydantic
models of the aggregate formats, msgspec Structs of the timeline formats' top-level keys.
"""
