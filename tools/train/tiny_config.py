"""The tiny DeepSeek-V4-Flash(-DSpark) configuration (HF config.json field names)."""
import copy

TARGET_LAYERS = 6
DSPARK_STAGES = 3


def hf_config(vocab_size, noise_token_id):
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "hc_eps": 1e-06,
        "hc_mult": 4,
        "hc_sinkhorn_iters": 20,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 256,
        "index_head_dim": 64,
        "index_n_heads": 4,
        "index_topk": 8,
        "initializer_range": 0.02,
        "max_position_embeddings": 1024,
        "model_type": "deepseek_v4",
        "moe_intermediate_size": 128,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": TARGET_LAYERS,
        "num_hash_layers": 2,
        "num_key_value_heads": 1,
        "num_nextn_predict_layers": 1,
        "o_groups": 2,
        "o_lora_rank": 64,
        "q_lora_rank": 128,
        "qk_rope_head_dim": 64,
        "quantization_config": {
            "activation_scheme": "dynamic",
            "fmt": "e4m3",
            "quant_method": "fp8",
            "scale_fmt": "ue8m0",
            "weight_block_size": [128, 128],
        },
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 4,
            "original_max_position_embeddings": 256,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 1.5,
        "scoring_func": "sqrtsoftplus",
        "sliding_window": 32,
        "swiglu_limit": 10.0,
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "transformers_version": "4.57.1",
        "use_cache": True,
        "vocab_size": vocab_size,
        "compress_rope_theta": 160000,
        # 6 target layers + 3 DSpark stages (pure sliding window), as in the 0731 release
        "compress_ratios": [0, 0, 4, 16, 4, 16] + [0] * DSPARK_STAGES,
        # DSpark drafter (mtp.{0,1,2}.*)
        "dspark_block_size": 5,
        "dspark_noise_token_id": noise_token_id,
        "dspark_target_layer_ids": [3, 4, 5],
        "dspark_markov_rank": 64,
    }


def generation_config():
    return {"_from_model_config": True, "bos_token_id": 0, "eos_token_id": 1, "do_sample": True,
            "temperature": 1.0, "top_p": 1.0, "transformers_version": "4.57.1"}


def copy_cfg(c):
    return copy.deepcopy(c)
