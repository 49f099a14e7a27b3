"""numba's CPU target made ready when this module is imported.

A process pays about 0.3 s (the 2-core host, 2026-12-06) at its first compiled call, cached
or not, for numba registering its own implementations. Only the workers' fork server imports
this module (lifeline.CAPTURE_PRELOAD, VERIFY_PRELOAD), so every worker forked from it starts
with that done instead of paying it on the run's startup path.
"""

from __future__ import annotations

import contextlib

# a step that only saves time: if numba refuses it here, each worker does it as before
with contextlib.suppress(Exception):
    from numba.core.registry import cpu_target

    cpu_target.target_context.refresh()
