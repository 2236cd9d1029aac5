"""qflow's own errors: bad input is reported naming the node and the problem."""

from __future__ import annotations


class QflowError(Exception):
    """Base class of every error qflow raises on purpose."""


class InputError(QflowError):
    """The object or graph handed to qflow cannot be analysed as given."""

    def __init__(self, message: str, node: str | None = None) -> None:
        self.node = node
        super().__init__(f"node {node!r}: {message}" if node else message)


class ProofError(QflowError):
    """`qflow.check` / the pipeline hook found obligations that do not hold."""

    def __init__(self, report: object) -> None:
        self.report = report
        super().__init__(str(report))
