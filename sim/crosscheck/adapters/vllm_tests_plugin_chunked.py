"""pytest plugin for the vLLM-ready tests (``docs/findings/vllm_tests/``), loaded with
``-p vllm_tests_plugin_chunked`` by ``sim/crosscheck/vllm_tests.py`` INSIDE the vLLM 0.33.0
environment.

- ``CROSSCHECK_FIX=001|001b|003``: applies that proposed fix in process
  (``fix001_chunked.apply_fix``) before any test runs; unset: the release as shipped.
- ``CROSSCHECK_OFFLINE_MODEL=DIR``: vLLM's ``create_vllm_config`` (used by
  ``RequestRunner``) names the model ``facebook/opt-125m``; this machine has no Hugging
  Face access, so the harness runs offline (``HF_HUB_OFFLINE=1``) with ``HF_HOME`` in a
  temporary directory, and the plugin writes that model's configuration into that cache
  (transformers' ``OPTConfig`` defaults, which are the 125m sizes; no weights: the tests
  never run the model).
- This machine has no GPU, so the CUDA wheel leaves vLLM on ``UnspecifiedPlatform``,
  whose ``support_hybrid_kv_cache()`` is False; ``RequestRunner`` enables the hybrid KV
  cache manager explicitly and ``VllmConfig`` then refuses it.  vLLM's CI runs these
  tests on GPU hosts, where the platform supports it; the plugin makes the unspecified
  platform answer True (the tests are scheduler-side and run no kernel).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

REVISION = "0" * 40


def _write_offline_model(hf_home: Path) -> None:
    import transformers

    repo = hf_home / "hub" / "models--facebook--opt-125m"
    snapshot = repo / "snapshots" / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    transformers.OPTConfig(architectures=["OPTForCausalLM"]).save_pretrained(snapshot)


def pytest_configure(config: Any) -> None:
    from vllm.platforms import current_platform
    from vllm.platforms.interface import UnspecifiedPlatform

    if isinstance(current_platform, UnspecifiedPlatform):
        UnspecifiedPlatform.support_hybrid_kv_cache = classmethod(  # type: ignore[method-assign]
            lambda cls: True)
    hf_home = os.environ.get("CROSSCHECK_OFFLINE_MODEL")
    if hf_home:
        _write_offline_model(Path(hf_home))
    fix = os.environ.get("CROSSCHECK_FIX") or None
    if fix is not None:
        from fix001_chunked import apply_fix

        apply_fix(fix)
