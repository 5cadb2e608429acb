"""The old home of the merge: see :mod:`traceconv.merge` (a package now); these names stay."""

from .merge import *  # noqa: F401,F403
from .merge import __doc__ as _doc  # noqa: F401
from .merge.align import (AUTO_MAX_SPREAD_NS, MIN_COLLECTIVES, SAME_CLOCK_SLACK_NS, Alignment, Loaded,  # noqa: F401
                          Match, _barrier, _candidates, _collectives, _match, _prior, _rank_collectives,
                          _rank_hosts, _steps, align, all_to_all, host_of, match_collectives)
from .merge.combine import _filter, _is_device, _named_window, append_rank, parse_window  # noqa: F401
from .merge.combine import shift as _shift  # noqa: F401
from .merge.driver import ARCHIVE, MergeResult, merge, rank_of_file  # noqa: F401
from .merge.inputs import collect_inputs, handler_name, rank_from_name  # noqa: F401
from .merge.options import (ALIGN_METHODS, RANK_MAX, RankSet, _rank_number, parse_duration,  # noqa: F401
                            parse_rank_map, parse_ranks)
from .merge.ranks import load_rank as _load_one  # noqa: F401
from .writers.archive import write_archive as _write_archive  # noqa: F401
