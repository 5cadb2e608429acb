"""Chrome Trace Event JSON: the generic reader (:mod:`.reader`) and the producers' dialects, each a
delta on it: :mod:`.kineto` (PyTorch profiler), :mod:`.composer`, :mod:`.mxnet`, :mod:`.megengine`.
The structure of their headers and metadata is checked by the msgspec Structs of :mod:`.schema`."""
