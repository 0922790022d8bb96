"""JSON that is JSON: NaN and infinities become null, and the output says which and why.

`json.dumps` writes NaN as a bare `NaN`, which strict parsers (jq, JavaScript, most
dashboards) refuse; a result line that cannot be parsed hides the very failure it reports.
"""

from __future__ import annotations

import json
import math
from typing import Any

NON_FINITE_KEY = "non_finite"  # {dotted.path: "nan" | "inf" | "-inf"} of what became null


def finite(obj: Any, path: str = "", found: dict[str, str] | None = None) -> Any:
    """`obj` with every non-finite float replaced by None, recording its path in `found`."""
    if isinstance(obj, float) and not math.isfinite(obj):
        if found is not None:
            found[path or "(value)"] = str(obj)
        return None
    if isinstance(obj, dict):
        return {k: finite(v, f"{path}.{k}" if path else str(k), found) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v, f"{path}[{i}]", found) for i, v in enumerate(obj)]
    return obj


def json_text(obj: Any, **kwargs: Any) -> str:
    """`json.dumps` of `obj` with non-finite numbers as null; a mapping gains `non_finite`
    naming them (e.g. a mean over zero episodes, or a diverged value)."""
    found: dict[str, str] = {}
    clean = finite(obj, found=found)
    if found and isinstance(clean, dict):
        clean[NON_FINITE_KEY] = found
    return json.dumps(clean, allow_nan=False, **kwargs)
