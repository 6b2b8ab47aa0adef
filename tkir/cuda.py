"""Deprecated alias: `tkir.cuda` moved to `tkir.backend.cuda` (the runtime lives in backend/).

`import tkir.cuda` still works and gives the very module `tkir.backend.cuda` (one lazy context, one
`CudaError` class), with a DeprecationWarning. `import tkir` alone does not import it, so the IR,
the front end, the passes and the interpreter never load the backend.
"""

from __future__ import annotations

import importlib
import sys
import warnings

warnings.warn("tkir.cuda is deprecated: import tkir.backend.cuda (to_device, empty, DeviceArray, CudaError)",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = importlib.import_module("tkir.backend.cuda")
