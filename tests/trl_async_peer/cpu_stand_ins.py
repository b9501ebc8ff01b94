"""Two parts of TRL 1.16's async trainer that exist for GPUs only, stood in for on this CPU machine. Declared test
seam: what they replace is hardware the machine lacks, not a behaviour of TRL or of hci-envs under test.

- ``get_peak_flops_per_device`` asks CUDA for the device's name (an MFU metric) and fails without a GPU driver;
  on CPU the trainer has no peak to compare with, which TRL itself reports as None.
- The trainer packs a batch's sequences into one row and runs attention over it with FlashAttention 3's
  variable-length kernel, fetched from the Hugging Face Hub (a GPU kernel; the Hub is not reachable here). The
  stand-in computes the same attention with torch's scaled_dot_product_attention, one packed sequence at a time:
  causal, aligned to the end of the keys when a sequence has fewer queries than keys (as FlashAttention does).
"""

from __future__ import annotations

from typing import Any


class VarlenAttention:
    """``flash_attn_varlen_func`` on CPU: q, k and v are (tokens, heads, dim), sequences cut at ``cu_seqlens``."""

    @staticmethod
    def flash_attn_varlen_func(q: Any, k: Any, v: Any, cu_seqlens_q: Any, cu_seqlens_k: Any, max_seqlen_q: int,
                               max_seqlen_k: int, softmax_scale: float | None = None, causal: bool = True,
                               window_size: tuple[int, int] = (-1, -1), softcap: float | None = None,
                               **_: Any) -> Any:
        import torch
        import torch.nn.functional as F

        if softcap:
            raise NotImplementedError("the CPU stand-in has no logit soft-capping")
        out = torch.empty_like(q)
        starts_q, starts_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        groups = q.shape[1] // k.shape[1]  # grouped-query attention: each key head serves this many query heads
        for (q0, q1), (k0, k1) in zip(zip(starts_q, starts_q[1:]), zip(starts_k, starts_k[1:])):
            if q1 == q0:
                continue
            queries = q[q0:q1].transpose(0, 1)
            keys = k[k0:k1].transpose(0, 1).repeat_interleave(groups, dim=0)
            values = v[k0:k1].transpose(0, 1).repeat_interleave(groups, dim=0)
            row = torch.arange(q1 - q0)[:, None] + ((k1 - k0) - (q1 - q0))  # each query's place among the keys
            col = torch.arange(k1 - k0)[None, :]
            allowed = col <= row if causal else torch.ones_like(col <= row)
            if window_size[0] >= 0:
                allowed = allowed & (col >= row - window_size[0])
            attended = F.scaled_dot_product_attention(queries, keys, values, attn_mask=allowed, scale=softmax_scale)
            out[q0:q1] = attended.transpose(0, 1)
        return out


def install() -> None:
    """Put both stand-ins in place in this process (the trainer's; the rollout worker needs neither)."""
    import trl.experimental.async_grpo.async_grpo_trainer as trainer
    import trl.experimental.async_grpo.packing as packing

    trainer.get_peak_flops_per_device = lambda accelerator, dtype: None
    packing._flash_attn = lambda: VarlenAttention
