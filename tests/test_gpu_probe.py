"""The CPU side of the 0.33.0 finding scripts (``sim/gpu/finding_cap.py``,
``sim/gpu/finding_swa.py`` and their shared ``sim/gpu/probe_chunked.py``), run end to end on
a stand-in engine: the probe's hooks, the keys and loads it records, the tier holdings,
the prefix-cache reset, the layout and the result file. The stand-in is a toy (a CPU tier
of whole 16-token keys, every prompt stored after it runs), not vLLM: it checks the
scripts' plumbing, not a finding (tests/test_finding003_gpu.py re-checks the H200 files).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from sim.gpu import finding_cap, finding_swa

CHUNK = 16


class _Sched:
    """A stand-in OffloadingConnectorScheduler: group 0 attention (sliding in the SWA
    layout), the last group Mamba; a key per group and 16-token chunk."""

    def __init__(self, groups: int) -> None:
        self.config = SimpleNamespace(tokens_per_hash=CHUNK, kv_group_configs=[
            SimpleNamespace(group_idx=g, tokens_per_chunk=CHUNK, requires_cow_source=g
                            == groups - 1, sliding_window_size_in_chunks=4 if g else None)
            for g in range(groups)])
        self.manager = SimpleNamespace(_policy=SimpleNamespace(chunks=set(),
                                                               cache_capacity=7))
        self._mamba_align_size = CHUNK
        self._req_status: dict[str, Any] = {}

    def get_num_new_matched_tokens(self, request: Any, num_computed: int) -> Any:
        n = len(self.config.kv_group_configs)
        keys = [[(g, tuple(request.tokens[:end])) for end in range(CHUNK, request.num_tokens,
                                                                     CHUNK)]
                for g in range(n)]
        pos = {k: len(k[1]) for group in keys for k in group}
        st = SimpleNamespace(
            req_context=SimpleNamespace(get_offload_key_position=pos.__getitem__),
            group_states=[SimpleNamespace(offload_keys=group) for group in keys],
            load_key_ranges=[], max_load_tokens=request.cap)
        self._req_status[request.request_id] = st
        held = self.manager._policy.chunks
        hit = 0
        while hit < len(keys[0]) and all(group[hit] in held for group in keys):
            hit += 1
        hit *= CHUNK
        if request.cap is not None:
            hit = min(hit, (request.cap - 1) // CHUNK * CHUNK)
        request.keys = keys
        return hit, False

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external: int) -> None:
        st = self._req_status[request.request_id]
        st.load_key_ranges = [(0, num_external, group[num_external // CHUNK - 1])
                              for group in request.keys] if num_external else []


class _Engine:
    """A stand-in LLM: each request looked up, allocated, stored whole; its greedy tokens
    a function of the prompt."""

    def __init__(self, sched_mod: ModuleType, groups: int, spec: Any, **_: Any) -> None:
        self.sched = sched_mod.OffloadingConnectorScheduler(groups)
        if spec is not None:  # the SWA script sizes the CPU tier through the spec
            spec(SimpleNamespace(worker_kv_bytes_per_block=1000, extra_config={}))
        self.count = 0
        self.refusals = 1  # the first reset is refused once: the tick runs
        self.queue: list[Any] = []
        self.llm_engine = self

    def _run(self, rid: str, tokens: list[int], n: int, extra: Any) -> Any:
        cap = ((extra or {}).get("kv_transfer_params") or {}).get("max_load_tokens")
        req = SimpleNamespace(request_id=rid, tokens=tokens, num_tokens=len(tokens), cap=cap)
        hit, _ = self.sched.get_num_new_matched_tokens(req, 0)
        self.sched.update_state_after_alloc(req, None, hit)
        for group in req.keys:
            self.sched.manager._policy.chunks.update(group)
        out = [(sum(tokens) * (i + 1)) % 97 for i in range(n)]
        return SimpleNamespace(request_id=rid, finished=True,
                               outputs=[SimpleNamespace(token_ids=out)])

    def generate(self, prompts: list[Any], params: Any, use_tqdm: bool) -> list[Any]:
        self.count += 1
        return [self._run(f"{self.count}-x", p.prompt_token_ids, params.max_tokens,
                          params.extra_args) for p in prompts]

    def add_request(self, rid: str, prompt: Any, params: Any) -> None:
        self.queue.append((f"{rid}-x", prompt.prompt_token_ids, params.max_tokens))

    def step(self) -> list[Any]:
        out = [self._run(rid, tokens, n, None) for rid, tokens, n in self.queue]
        self.queue = []
        return [SimpleNamespace(request_id=o.request_id.removesuffix("-x"),
                                finished=True, outputs=o.outputs) for o in out]

    def reset_prefix_cache(self, reset_connector: bool) -> bool:
        if self.refusals:
            self.refusals -= 1
            return False
        if reset_connector:
            self.sched.manager._policy.chunks.clear()
        return True


def stand_in_vllm(groups: int) -> dict[str, ModuleType]:
    """The modules the scripts import, standing in for torch and vLLM 0.33.0."""
    mods = {name: ModuleType(name) for name in (
        "torch", "vllm", "vllm.config", "vllm.inputs", "vllm.utils", "vllm.utils.math_utils",
        "vllm.distributed", "vllm.distributed.kv_transfer",
        "vllm.distributed.kv_transfer.kv_connector",
        "vllm.distributed.kv_transfer.kv_connector.v1",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading",
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler",
        "vllm.v1", "vllm.v1.kv_offload", "vllm.v1.kv_offload.base", "vllm.v1.kv_offload.cpu",
        "vllm.v1.kv_offload.cpu.spec", "vllm.v1.attention", "vllm.v1.attention.backends",
        "vllm.v1.attention.backends.triton_attn")}
    sched_mod = mods["vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"]
    sched_mod.OffloadingConnectorScheduler = type("OffloadingConnectorScheduler", (_Sched,),
                                                  {})
    spec_cls = type("CPUOffloadingSpec", (), {"BLOCK_SIZE_ALIGNMENT": 64,
                                              "__init__": lambda self, config: None})
    mods["vllm.v1.kv_offload.cpu.spec"].CPUOffloadingSpec = spec_cls
    mods["vllm.v1.attention.backends.triton_attn"].TritonAttentionBackend = type(
        "TritonAttentionBackend", (), {})
    mods["torch"].cuda = SimpleNamespace(get_device_name=lambda i: "stand-in")
    v = mods["vllm"]
    v.__version__ = "0.33.0"
    v.LLM = lambda **k: _Engine(sched_mod, groups, spec_cls if groups > 1 else None)
    v.SamplingParams = lambda max_tokens, extra_args=None, **k: SimpleNamespace(
        max_tokens=max_tokens, extra_args=extra_args)
    mods["vllm.config"].KVTransferConfig = lambda **k: k
    mods["vllm.inputs"].TokensPrompt = lambda prompt_token_ids: SimpleNamespace(
        prompt_token_ids=prompt_token_ids)
    mods["vllm.utils.math_utils"].round_up = lambda x, a: -(-x // a) * a
    mods["vllm.v1.kv_offload.base"].get_offload_group_idx = lambda key: key[0]
    return mods


def run_cap(mod: Any, out: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """finding_cap's run (``mod``: the script) on the stand-in, its result file read back."""
    for name, m in stand_in_vllm(1).items():
        monkeypatch.setitem(sys.modules, name, m)
    monkeypatch.setattr(mod, "build_model", lambda model_dir: None)
    assert mod.run(str(out), None) == 0
    return dict(json.loads(out.read_text()))


def run_swa(mod: Any, out: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """finding_swa's run on the stand-in, its result file read back."""
    for name, m in stand_in_vllm(2).items():
        monkeypatch.setitem(sys.modules, name, m)
    assert mod.run("unused", str(out)) == 0
    return dict(json.loads(out.read_text()))


def test_cap_script_on_a_stand_in_engine(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    r = run_cap(finding_cap, tmp_path / "cap.json", monkeypatch)
    assert r["error"] is None and r["vllm_version"] == "0.33.0"
    assert r["layout"] == {"offload_groups": [{"group": 0, "tokens_per_chunk": 16,
                                               "mamba": True}],
                           "tokens_per_hash": 16, "mamba_align_size": 16}
    assert r["tier_held_after_cold"] == ["0:16", "0:32"]
    cap, nocap = r["steps"]["cap32"], r["steps"]["nocap"]
    assert [x["hit"] for x in cap["lookups"]] == [16] and cap["loaded_tokens"] == 16
    assert cap["lookups"][0]["max_load_tokens"] == 32
    assert cap["loads"][0]["mamba_loads"] == [{"serves": [0, 16], "state_at": 16}]
    assert nocap["loaded_tokens"] == 32 and nocap["equal_to_cold"] is True


def test_swa_script_on_a_stand_in_engine(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    r = run_swa(finding_swa, tmp_path / "swa.json", monkeypatch)
    assert r["error"] is None
    assert r["layout"]["offload_groups"][0] == {
        "group": 0, "tokens_per_chunk": 16, "sliding_window_size_in_chunks": None,
        "mamba": False}
    assert r["layout"]["tier_capacity"] == 7
    control, evict = r["scenarios"]["control"], r["scenarios"]["evict"]
    assert control["lookups"] == [[0, 192]] and control["equal"] is True
    assert control["mamba_loads"] == [{"serves": [0, 192], "state_at": 192}]
    assert evict["tier_held_of_A_before_B"][-1] == "1:192"
    assert r["scenarios"]["recompute"]["equal_to_cold"] is True


@pytest.mark.parametrize("script", [finding_cap, finding_swa])
def test_scripts_need_the_engine_in_process(script: Any, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    argv = ["--out", "x"] if script is finding_cap else ["run", "--model-dir", "d",
                                                        "--out", "x"]
    assert script.main(argv) == 2
    assert "VLLM_ENABLE_V1_MULTIPROCESSING=0" in capsys.readouterr().err
