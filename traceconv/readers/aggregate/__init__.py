"""Aggregate timer formats: totals per timer, not timestamps.  Each reader validates its input and
builds an :class:`~traceconv.readers.aggregate.synth.AggNode` tree that :mod:`.synth` lays out as a
synthesized timeline (marked as such in the trace's metadata)."""
