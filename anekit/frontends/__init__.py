"""Front ends: other frameworks' models into MIL, and the ANE rewrite passes they share.

``anekit.frontends.torch`` converts PyTorch models (through ``torch.export``);
``anekit.frontends.passes`` holds the MIL -> MIL rewrites that make any program
ANE-friendly. Nothing here imports torch until a torch function is called.
"""
