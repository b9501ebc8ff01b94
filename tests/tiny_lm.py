"""A tiny causal language model and its tokenizer, built here from a config and local text: the Hub is not
reachable, and the tests need a real model that TRL trains, not a stand-in.

The architecture is Qwen2's (about 100k parameters), the tokenizer a byte-level BPE trained on the text the
model will see, and the chat template TRL's own copy of Qwen2.5's (read from the installed trl package): TRL
recognises it and parses the model's ``<tool_call>{json}</tool_call>`` output into tool calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
#: Qwen's markup, kept whole so that a tool call costs few tokens.
ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
#: transformers rebuilds a qwen2 tokenizer's pre-tokenizer from this pattern when it loads one; training with the
#: same pattern keeps the token ids the same whichever class loads it.
SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"""
         r"""|\s+(?!\S)|\s+""")


def chat_template() -> str:
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text(encoding="utf-8")


def tokenizer_from(corpus: list[str], vocab_size: int = 4096) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainer=trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None,
        padding_side="left", clean_up_tokenization_spaces=False)
    tokenizer.add_tokens(ADDED, special_tokens=False)
    tokenizer.chat_template = chat_template()
    return tokenizer


def build(out: Path, conversations: list[dict[str, Any]], *, seed: int = 0, heads: int = 4, kv_heads: int = 2) -> Path:
    """A tokenizer trained on ``conversations`` (rows of ``messages`` and ``tools``, as rendered by the chat
    template) and an untrained tiny model, saved to ``out``. Its attention heads are 64 / ``heads`` wide: vLLM's
    CPU attention takes 32 and more (``heads=2``), not the default's 16."""
    import json

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    draft = tokenizer_from(["hello world"] * 10, vocab_size=300)  # only to render the template's text
    corpus = [draft.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
              for row in conversations]
    tokenizer = tokenizer_from(corpus * 4)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
