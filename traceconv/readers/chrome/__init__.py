"""Chrome Trace Event JSON: the generic reader (:mod:`.reader`) and the producers' dialects, each a
delta on it: :mod:`.kineto` (PyTorch profiler), :mod:`.composer`, :mod:`.mxnet`, :mod:`.megengine`.
The structure of their headers and metadata is validated by the pydantic models of :mod:`.schema`."""
