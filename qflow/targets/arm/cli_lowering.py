"""`qflow check --arm TOSA_SPEC [--per-pass]`: lower a saved program with the real Arm TOSA
partitioner and hand the CLI each partition as the backend sees it after its fold pass."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from qflow.errors import InputError


def parse_spec(text: str) -> Any:
    """The TosaSpecification `text` names; InputError saying why when it names none."""
    try:
        from executorch.backends.arm.tosa.specification import TosaSpecification
    except ImportError as e:
        raise InputError(f"--arm needs ExecuTorch's Arm backend ({e}): pip install 'qflow[arm]'") from e
    try:
        return TosaSpecification.create_from_string(text)
    except ValueError:
        raise InputError(
            f"--arm {text}: not a TOSA specification (e.g. TOSA-1.0+INT, TOSA-1.0+INT+int16, "
            "TOSA-1.0+INT+FP, TOSA-1.0+FP)"
        ) from None


def folded_partitions(path: Path, ep: Any, spec: Any, say: Callable[[str], None]) -> list[tuple[str, Any]]:
    """(name, partition) for each partition of `ep`'s Arm lowering, right after its fold pass.
    A lowering that fails after folding some partitions says so (`say`) and returns those."""
    from qflow.targets.arm.pipeline import capture_after, lower

    has_qdq = any("quantize_per_" in str(n.target) for n in ep.graph_module.graph.nodes if n.op == "call_function")
    if has_qdq and not spec.support_integer():
        raise InputError(
            f"--arm {spec}: a specification without the INT profile cannot lower a quantized program "
            "(it has quantize/dequantize nodes); use e.g. TOSA-1.0+INT or TOSA-1.0+INT+FP"
        )
    with capture_after() as partitions:
        try:
            lower(ep, (), spec=str(spec))
        except Exception as e:  # the backend's own error: one line, not its traceback
            lines = str(e).strip().splitlines()
            why = f"the Arm TOSA lowering ({spec}) failed: {type(e).__name__}: {lines[0] if lines else ''}"
            if not partitions:
                raise InputError(why) from e
            say(f"{path}: {why}; checking the {len(partitions)} partition(s) it folded")
    return [(f"{path.name} partition {i} ({spec})", part) for i, part in enumerate(partitions)]
