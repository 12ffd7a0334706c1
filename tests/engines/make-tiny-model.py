#!/usr/bin/env python3
"""Writes a tiny Llama with seeded random weights and a locally trained tokenizer into DIR.

No model hub: the config, the weights (torch, seeded) and a byte-level BPE tokenizer trained
on a generated corpus (`tokenizers`, deterministic) are all made here, so a real engine can
serve it on a machine with only the package registries. Random weights are fine for capacity
work: requests fix their output length (`ignore_eos` with `max_tokens`). The vocabulary is
deliberately smaller than the token ids a client might guess (8,192), and the chat template
adds tokens of its own, as real ones do.

Usage: make-tiny-model.py DIR [--gguf CONVERTER_DIR]
"""
import json
import os
import random
import sys

VOCAB = 8192
SEED = 20261206
# What the load generator's chat prompts are made of, and more: the tokenizer learns each
# of these as one token.
WORDS = (
    "the model serves tokens under load while every class meets its latency target with "
    "spare capacity a an and or of to in on for by at from as is are was be this that "
    "request response prompt answer engine cache prefix batch queue replica cluster token "
    "user system assistant question think plan measure rate second minute hour time"
).split()


def corpus(lines=20000):
    rng = random.Random(SEED)
    for _ in range(lines):
        yield " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40)))
        # Digits and punctuation, so byte-level merges cover them too.
        yield f"{rng.randint(0, 10**6)} {rng.choice(WORDS)}, {rng.choice(WORDS)}. {rng.choice(WORDS).upper()}!"


def tokenizer(out):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    special = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    template = (
        "{% for m in messages %}"
        "{{ '<|' + m['role'] + '|>' }}{{ m['content'] }}{{ '<|end|>' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "</s>",
        "add_bos_token": False,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": template,
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token")}, f)
    return tok.get_vocab_size()


def model(out, vocab):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    m = LlamaForCausalLM(config)
    m.save_pretrained(out, safe_serialization=True)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    vocab = tokenizer(out)
    model(out, vocab)
    print(out)


if __name__ == "__main__":
    main()
