"""Adapters from real IRs (torch.fx, torchao, ExecuTorch) to the domain graph.

This is the only package of qflow that imports torch.
"""
