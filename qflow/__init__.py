"""qflow: prove quantized PyTorch / ExecuTorch graphs consistent, and repair them."""

from qflow._version import __version__
from qflow.api import analyze, domain_graph, plan, repair
from qflow.domain import FLOAT, Domain
from qflow.errors import InputError, ProofError, QflowError
from qflow.report.model import Finding, Report

__all__ = [
    "__version__",
    "FLOAT",
    "Domain",
    "Finding",
    "InputError",
    "ProofError",
    "QflowError",
    "Report",
    "analyze",
    "domain_graph",
    "plan",
    "repair",
]
