"""Hugging Face models built from their configs with random weights (needs `transformers`).

    opaudit scan examples/hf_models.py:bert --train
    opaudit scan examples/hf_models.py:gpt2 --train
    opaudit scan examples/hf_models.py:llama_7b --train        # 6.7 B parameters: traced on meta

Each factory returns (model, inputs); the inputs carry labels, so the model computes its own loss.
Nothing is downloaded.
"""

import torch

BATCH, SEQ = 2, 32


def _text_inputs(vocab: int, seq: int = SEQ, labels: bool = True, classes: int | None = None):
    ids = torch.randint(0, vocab, (BATCH, seq))
    inputs = {"input_ids": ids, "attention_mask": torch.ones(BATCH, seq, dtype=torch.long)}
    if labels:
        inputs["labels"] = torch.randint(0, classes, (BATCH,)) if classes else ids.clone()
    return inputs


def bert():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig()
    return BertForSequenceClassification(config), _text_inputs(config.vocab_size, classes=config.num_labels)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config()
    return GPT2LMHeadModel(config), _text_inputs(config.vocab_size)


def _llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**kw)
    return LlamaForCausalLM(config), _text_inputs(config.vocab_size)


def llama_small():
    return _llama(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=8, vocab_size=1000)


def llama_7b():
    return _llama(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=32, vocab_size=32000)
