"""Front ends: other frameworks' models into MIL.

``anekit.frontends.torch`` converts PyTorch models (through ``torch.export``) and runs
the convert pipeline of ``anekit.passes`` on the result. Nothing here imports torch
until a torch function is called.
"""
