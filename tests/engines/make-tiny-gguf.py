#!/usr/bin/env python3
"""Writes the tiny test model (make-tiny-model.py's folder) as a GGUF file for llama.cpp.

The Hugging Face converter refuses a tokenizer it does not recognise (it matches the
pre-tokenizer against a list of published models), so the file is written here with the
GGUF writer vendored beside llama.cpp (PYTHONPATH=<install-llama-cpp.sh's folder>/gguf-py):
the same weights in float32 (q and k permuted for llama.cpp's rotary embedding, as its
converter does), the byte-level BPE vocabulary and merges, and the chat template.

Usage: make-tiny-gguf.py MODEL_DIR OUT.gguf
"""
import json
import os
import sys

import numpy as np
from safetensors.numpy import load_file

import gguf


def permute(w, n_head):
    """llama.cpp's rotary layout of a q or k projection (its converter's permute)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model, out = sys.argv[1], sys.argv[2]
    config = json.load(open(os.path.join(model, "config.json")))
    tokenizer = json.load(open(os.path.join(model, "tokenizer.json")))
    tok_config = json.load(open(os.path.join(model, "tokenizer_config.json")))
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("tiny-llama")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_block_count(config["num_hidden_layers"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_rope_dimension_count(config["head_dim"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config.get("rope_theta") or config.get("rope_parameters", {}).get("rope_theta")
    w.add_rope_freq_base(rope or 10000.0)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)

    vocab = tokenizer["model"]["vocab"]
    special = {t["content"]: t["id"] for t in tokenizer.get("added_tokens", [])}
    for content, i in special.items():
        vocab.setdefault(content, i)
    tokens = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    tokens = [t if t is not None else f"[PAD{i}]" for i, t in enumerate(tokens)]
    types = [
        gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens
    ]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    # The GPT-2 byte-level split, which tokenizers' ByteLevel pre-tokenizer applies.
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(special[tok_config["bos_token"]])
    w.add_eos_token_id(special[tok_config["eos_token"]])
    w.add_add_bos_token(False)
    w.add_chat_template(tok_config["chat_template"])

    weights = load_file(os.path.join(model, "model.safetensors"))
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    per_layer = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    for i in range(config["num_hidden_layers"]):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}"] = f"blk.{i}.{gg}"
    for hf, gg in names.items():
        t = weights[hf].astype(np.float32)
        if hf.endswith("q_proj.weight"):
            t = permute(t, n_head)
        elif hf.endswith("k_proj.weight"):
            t = permute(t, n_kv)
        w.add_tensor(gg, t)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(out)


if __name__ == "__main__":
    main()
