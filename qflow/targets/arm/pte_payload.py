"""The Arm delegates of a ``.pte``: a TOSA flatbuffer (TOSABackend) or Vela's Ethos-U command
stream (EthosUBackend), read for their IO and, for TOSA, handed to the artifact check anchored
at what the program around the delegate call states (`PayloadSite`)."""

from __future__ import annotations

import importlib
from types import ModuleType

from qflow.domain import FLOAT, Domain
from qflow.graph import DomainGraph
from qflow.ir.payload_io import PayloadIO, PayloadSite
from qflow.ir.pte_program import ITEMSIZE, Delegate
from qflow.targets.arm import tosa_io
from qflow.targets.arm.vela import ELEM_DTYPE, io_elem_sizes

_FLOATS = ("float32", "float16", "bfloat16")

#: The TOSA artifact check a TOSA payload is handed to. It reads the PT2E reference with torch, so
#: it is imported only when a TOSA delegate is met; where it cannot be imported, the domains at a
#: TOSA delegate's integer IO stay *unproven*, never assumed.
TOSA_ARTIFACT_CHECK = "qflow.targets.arm.tosa_artifact"


def _artifact_check() -> ModuleType | None:
    try:
        return importlib.import_module(TOSA_ARTIFACT_CHECK)
    except ImportError:
        return None


def read_payload(d: Delegate, fed: list[str], declared: list[str]) -> PayloadIO:
    """The IO of an Arm delegate's payload, by its backend id."""
    if d.backend_id == "TOSABackend":
        return _tosa_payload(d)
    if d.backend_id == "EthosUBackend":
        return _vela_payload(d, fed, declared)
    return PayloadIO(None, None, f"{d.backend_id} payload (no reader)")


def _tosa_payload(d: Delegate) -> PayloadIO:
    names = tosa_io.io_names(d.payload)
    if names is None:
        return PayloadIO(None, None, "TOSA flatbuffer (unreadable)")
    ins, outs = [t for _, t in names[0]], [t for _, t in names[1]]
    checked = _artifact_check() is not None  # (then its integer IO is decided by check_payload)
    return PayloadIO(
        [(t, None) for t in ins],
        [(t, FLOAT if t in _FLOATS else None) for t in outs],
        "TOSA flatbuffer",
        unknown_domain="the domain of a TOSA delegate's integer codes is set inside the TOSA flatbuffer (RESCALE, "
        f"zero points); its artifact check ({TOSA_ARTIFACT_CHECK}) cannot be imported, so it is not proved",
        anchored=checked,
    )


def _vela_payload(d: Delegate, fed: list[str], declared: list[str]) -> PayloadIO:
    """Ethos-U: Vela's command stream states each IO tensor's element size, not
    its type or domain. A size that agrees with the program's dtype confirms it;
    another names the dtype the NPU really reads or writes."""
    sizes = io_elem_sizes(d.payload)
    if sizes is None or len(sizes["inputs"]) != len(fed) or len(sizes["outputs"]) != len(declared):
        return PayloadIO(None, None, "Vela command stream (unreadable)")

    def side(seen: list[str], ns: list[int]) -> list[tuple[str, Domain | None]]:
        return [
            (t if ITEMSIZE.get(t) == n else ELEM_DTYPE.get(n, f"{n}-byte"), None) for t, n in zip(seen, ns, strict=True)
        ]

    return PayloadIO(
        side(fed, sizes["inputs"]),
        side(declared, sizes["outputs"]),
        "Vela command stream",
        None,
        "Vela's command stream records element sizes, not quantization domains",
    )


def check_payload(dg: DomainGraph, d: Delegate, site: PayloadSite) -> bool:
    """Check a TOSA payload with the artifact check, anchored at what the program states: the
    domain fed to each input, the dequantize of each output. True when checked (its checks
    then decide the domains at the delegate's IO); False, with a note, when the check failed."""
    names, tosa_artifact = tosa_io.io_names(d.payload), _artifact_check()
    assert names is not None and tosa_artifact is not None  # (read_payload anchored only these)
    inputs = {name: dom for (name, _), dom in zip(names[0], site.inputs, strict=False)}
    ref = site.reference
    try:
        tosa = tosa_artifact.read(d.payload)
        anchors = tosa_artifact.Anchors(
            inputs=inputs, outputs=list(site.outputs), consts={}, partition_activations=False
        )
        if ref is not None:
            anchors.consts = tosa_artifact.link_constants(tosa, ref.constants)
            anchors.activations = list(ref.activations)
            anchors.partition_activations = site.lowers_every_activation
        checks = tosa_artifact.validate(tosa, anchors)
        tosa_artifact.add_evidence(dg, site.call, site.call, checks)
    except Exception as e:  # an artifact the check cannot follow: the IO stays unproven, saying why
        dg.notes.append(f"{site.call}: the TOSA artifact check failed ({type(e).__name__}: {e}); IO domains unproven")
        return False
    anchored = "the program's Q/DQ" + (f", {len(anchors.consts)} constants of the reference" if ref else "")
    dg.notes.append(f"{site.call}: TOSA artifact checked ({len(checks)} checks, anchored at {anchored})")
    return True
