"""What a backend's reader of a delegate payload says to the .pte reader, and what the .pte
reader tells a backend's artifact check about the delegate call around its payload.

The .pte reader knows no backend: it asks the target that owns a delegate's backend id
(`qflow.targets.for_backend`) for its ``read_payload`` and ``check_payload`` hooks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qflow.domain import Domain
from qflow.graph import DomainGraph


@dataclass
class PayloadIO:
    """What a delegate payload says about its IO: per input / output, the
    dtype it reads or writes and, when recorded, the domain of the codes
    (None: integer codes in a domain the payload does not state)."""

    inputs: list[tuple[str, Domain | None]] | None  # None: the payload's IO is not readable
    outputs: list[tuple[str, Domain | None]] | None
    artifact: str  # where it was read, for messages
    graph: DomainGraph | None = None  # the payload's own obligations (names relative to the delegate)
    #: Why an integer IO domain is unknown (the message of the unproven obligation).
    unknown_domain: str = ""
    #: The backend's ``check_payload`` decides the domains at this payload's integer IO, from
    #: what the program feeds and reads (`PayloadSite`), once the whole plan is read.
    anchored: bool = False
    #: For each payload input, the delegate call argument it reads (XNNPACK's external ids;
    #: None: the k-th). An argument no input reads (a lifted weight the payload holds as its
    #: own constant) is not the backend's to read.
    input_args: list[int] | None = None
    #: For each payload output, the delegate call output it writes (XNNPACK's external ids past the
    #: inputs; None: the k-th). A call output no payload output writes is never written.
    output_args: list[int] | None = None
    #: The shapes of the float weights the payload multiplies as constants (XNNPACK fully-connected
    #: filters): an unread argument that tiles one (its scales per channel or per group) was dropped.
    float_weights: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class PayloadSite:
    """What the program states around one delegate call, for the backend's artifact check."""

    #: The delegate call's value in the domain graph (its checks are evidence on it).
    call: str
    #: Per payload input, in call order: the domain of what the program feeds (FLOAT for a
    #: float tensor; None: unknown).
    inputs: tuple[Domain | None, ...]
    #: Per payload output: the domain the program reads it in and where that is stated
    #: ((None, "") when nothing states it).
    outputs: tuple[tuple[Domain | None, str], ...]
    #: What the backend's ``read_reference`` made of the program the .pte was lowered from, or None.
    reference: Any = None
    #: One delegate and no activation kernel on the CPU: every activation of the reference
    #: program is inside this delegate (or was exact to drop).
    lowers_every_activation: bool = False
