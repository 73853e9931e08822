# SPDX-License-Identifier: MIT
"""kt: MoE routed experts on the CPU. `from kt import KTMoEWrapper` is a
drop-in for `from kt_kernel import KTMoEWrapper`."""
from . import _lib
from ._ctx import KtError, isa_name, ctx_threads
from .wrapper import KTMoEWrapper

__version__ = "0.1.0"
library_path = _lib.path
has_ring = _lib.HAVE_RING

__all__ = ["KTMoEWrapper", "KtError", "isa_name", "ctx_threads",
           "library_path", "has_ring"]
