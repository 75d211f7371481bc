"""The KV-cache group layouts real model configurations produce on vLLM 0.33.0.

``vllm_side/`` runs inside the 0.33.0 environment and is never imported here;
``derive.py`` (this package) runs it, ``table.py`` renders the committed markdown from the
committed JSON, ``cli.py`` is ``python -m sim.layouts``. The templates the generator and
the proofs use are ``model.real_layouts``.
"""
