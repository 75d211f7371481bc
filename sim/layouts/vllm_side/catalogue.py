"""The model configurations the layout table covers: HF-style config.json contents.

KV-relevant dimensions (hidden size, attention heads and head size, Mamba state and
head sizes, which layers are attention and which Mamba) follow the published
configuration of the model named in ``like``, written down by hand (this machine has
no network); layer counts are cut to a short pattern with the same kinds of layers and
vocabulary, MLP and expert sizes are made small: none of these enter a KV-cache spec
except the number of layers of each kind, which decides how many groups there are.
Pure data; read by derive.py.
"""

_COMMON = {"vocab_size": 256, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
           "tie_word_embeddings": False, "rms_norm_eps": 1e-5}

MAMBA1 = {**_COMMON, "architectures": ["MambaForCausalLM"], "model_type": "mamba",
          "hidden_size": 2560, "state_size": 16, "conv_kernel": 4, "expand": 2,
          "time_step_rank": 160, "num_hidden_layers": 4, "layer_norm_epsilon": 1e-5}

MAMBA2 = {**_COMMON, "architectures": ["Mamba2ForCausalLM"], "model_type": "mamba2",
          "hidden_size": 2560, "state_size": 128, "conv_kernel": 4, "expand": 2,
          "head_dim": 64, "num_heads": 80, "n_groups": 1, "chunk_size": 256,
          "num_hidden_layers": 4, "layer_norm_epsilon": 1e-5}

JAMBA = {**_COMMON, "architectures": ["JambaForCausalLM"], "model_type": "jamba",
         "hidden_size": 4096, "intermediate_size": 512, "num_hidden_layers": 8,
         "attn_layer_period": 8, "attn_layer_offset": 4, "expert_layer_period": 2,
         "expert_layer_offset": 1, "num_experts": 2, "num_experts_per_tok": 2,
         "num_attention_heads": 32, "num_key_value_heads": 8, "mamba_d_state": 16,
         "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 256}

NEMOTRON_H = {**_COMMON, "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
              "hidden_size": 4096, "intermediate_size": 512, "num_hidden_layers": 8,
              "hybrid_override_pattern": "M-M-M*-M", "num_attention_heads": 32,
              "num_key_value_heads": 8, "head_dim": 128, "mamba_num_heads": 128,
              "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4,
              "expand": 2, "mamba_hidden_act": "silu", "mlp_hidden_act": "relu2",
              "layer_norm_epsilon": 1e-5, "chunk_size": 128}

NEMOTRON_H_SWA = {**NEMOTRON_H, "sliding_window": 1024}

QWEN3_NEXT = {**_COMMON, "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
              "hidden_size": 2048, "intermediate_size": 512, "num_hidden_layers": 8,
              "full_attention_interval": 4, "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 256, "linear_num_value_heads": 32,
              "linear_num_key_heads": 16, "linear_key_head_dim": 128,
              "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 4,
              "num_experts_per_tok": 2, "moe_intermediate_size": 256,
              "shared_expert_intermediate_size": 256, "decoder_sparse_step": 1,
              "mlp_only_layers": [], "partial_rotary_factor": 0.25, "rope_theta": 10000000,
              "hidden_act": "silu", "num_nextn_predict_layers": 1}

FALCON_H1 = {**_COMMON, "architectures": ["FalconH1ForCausalLM"], "model_type": "falcon_h1",
             "hidden_size": 3072, "intermediate_size": 512, "num_hidden_layers": 4,
             "num_attention_heads": 12, "num_key_value_heads": 2, "head_dim": 128,
             "mamba_d_ssm": 6144, "mamba_n_heads": 48, "mamba_d_head": 128,
             "mamba_d_state": 256, "mamba_n_groups": 1, "mamba_d_conv": 4,
             "mamba_expand": 2, "mamba_chunk_size": 128, "mamba_conv_bias": True,
             "mamba_proj_bias": False, "mamba_rms_norm": False, "hidden_act": "silu"}

GRANITE_4_H = {**_COMMON, "architectures": ["GraniteMoeHybridForCausalLM"],
               "model_type": "granitemoehybrid", "hidden_size": 4096,
               "intermediate_size": 512, "num_hidden_layers": 10,
               "layer_types": ["mamba"] * 4 + ["attention"] + ["mamba"] * 4 + ["attention"],
               "num_attention_heads": 32, "num_key_value_heads": 8, "mamba_n_heads": 128,
               "mamba_d_head": 64, "mamba_d_state": 128, "mamba_n_groups": 1,
               "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
               "mamba_conv_bias": True, "mamba_proj_bias": False,
               "num_local_experts": 2, "num_experts_per_tok": 2,
               "shared_intermediate_size": 512, "position_embedding_type": "nope",
               "hidden_act": "silu"}

# an EAGLE-1 head (a one-layer Llama) for a target with hidden size 4096
EAGLE_LLAMA_4096 = {**_COMMON, "architectures": ["EagleLlamaForCausalLM"], "model_type": "llama",
                    "hidden_size": 4096, "intermediate_size": 512, "num_hidden_layers": 1,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                    "hidden_act": "silu"}

# a small Llama draft model (separate weights, same vocabulary)
DRAFT_LLAMA = {**_COMMON, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
               "hidden_size": 1024, "intermediate_size": 512, "num_hidden_layers": 2,
               "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128,
               "hidden_act": "silu"}

# (name, like, hf config)
MODELS = (
    ("mamba1", "state-spaces/mamba-2.8b-hf", MAMBA1),
    ("mamba2", "state-spaces/mamba2-2.7b", MAMBA2),
    ("jamba", "ai21labs/AI21-Jamba-Mini-1.5", JAMBA),
    ("nemotron-h", "nvidia/Nemotron-H-8B-Base-8K", NEMOTRON_H),
    ("nemotron-h-swa", "nvidia/Nemotron-H-8B-Base-8K with sliding_window 1024", NEMOTRON_H_SWA),
    ("qwen3-next", "Qwen/Qwen3-Next-80B-A3B-Instruct", QWEN3_NEXT),
    ("falcon-h1", "tiiuae/Falcon-H1-7B-Instruct", FALCON_H1),
    ("granite-4.0-h", "ibm-granite/granite-4.0-h-small", GRANITE_4_H),
)

# (name, speculative_config without "model", draft hf config or None for the target's own)
DRAFTERS = {
    "none": None,
    "mtp": ({"method": "mtp", "num_speculative_tokens": 1}, None),
    "eagle": ({"method": "eagle", "num_speculative_tokens": 1}, EAGLE_LLAMA_4096),
    "draft_model": ({"method": "draft_model", "num_speculative_tokens": 1}, DRAFT_LLAMA),
}

ATTENTION_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")

# which drafters each model gets (the architecture supports them)
MODEL_DRAFTERS = {
    "qwen3-next": ("none", "mtp"),
    "nemotron-h": ("none", "eagle", "draft_model"),
    "nemotron-h-swa": ("none", "eagle"),
    "jamba": ("none", "eagle"),
}

# --prefix-match-unit for the rows that ask for hits inside a block: the smallest kernel
# block of every attention backend here (with every drafter), and 48, which divides some
# models' block sizes and not others' (no drafter)
PREFIX_MATCH_UNIT = 16
PREFIX_MATCH_UNIT_ODD = 48

# extra (model, backend, drafter, blocks_per_chunk) rows: the one layout with different
# block sizes per group, with offloaded blocks of two GPU blocks
EXTRA_CHUNKED = (("nemotron-h-swa", "FLASHINFER", "none", 2),)
