"""qflow: prove quantized PyTorch / ExecuTorch graphs consistent, and repair them."""

from qflow.api import analyze, domain_graph, plan, repair
from qflow.domain import FLOAT, Domain
from qflow.errors import InputError, ProofError, QflowError
from qflow.report.model import Finding, Report

__all__ = [
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
__version__ = "0.1.0"
