"""GPT-style transformer shapes, from a CPU-friendly toy to GPT-3 XL.

Plain data (no torch import) so the analytic model and the CLI can use it cheaply.
Shapes follow GPT-3's table (Brown et al. 2020) above `tiny`; `xl` is the ~1.3B model
used for 100B-token runs on 8xA100.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class TransformerShape:
    n_layer: int
    n_head: int
    d_model: int
    seq_len: int
    vocab_size: int

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def block_params(self) -> int:
        """One transformer block: qkv+proj (4d^2+4d), mlp (8d^2+5d), 2 layernorms (4d); one FSDP unit each."""
        d = self.d_model
        return 12 * d * d + 13 * d

    def root_params(self) -> int:
        """What FSDP's root unit (the GPT itself) holds beside the blocks: the token embedding (tied to the head), the
        positions and the final layernorm."""
        return self.embedding_params() + 2 * self.d_model

    def non_embedding_params(self) -> int:
        """Weights in the blocks (attention 4d^2 + MLP 8d^2 + biases/LN): what "model size" tables quote."""
        return self.n_layer * self.block_params() + 2 * self.d_model  # final layernorm

    def matmul_params(self) -> int:
        """Weights that take part in a matmul, the N of 6N: qkv, proj and MLP in every block, plus the LM head.

        The head is tied to the token embedding (one tensor) but x @ W^T over d_model x vocab is real
        compute; the embedding lookups are gathers, and biases and layernorms elementwise: no matmul FLOPs.
        """
        return self.n_layer * 12 * self.d_model ** 2 + self.d_model * self.vocab_size

    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model + self.seq_len * self.d_model  # tied token emb + positions

    def total_params(self) -> int:
        return self.non_embedding_params() + self.embedding_params()


PRESETS = {
    "tiny": TransformerShape(n_layer=4, n_head=4, d_model=256, seq_len=128, vocab_size=512),
    "small": TransformerShape(n_layer=12, n_head=12, d_model=768, seq_len=1024, vocab_size=50304),
    "medium": TransformerShape(n_layer=24, n_head=16, d_model=1024, seq_len=1024, vocab_size=50304),
    "large": TransformerShape(n_layer=24, n_head=16, d_model=1536, seq_len=2048, vocab_size=50304),
    "xl": TransformerShape(n_layer=24, n_head=16, d_model=2048, seq_len=2048, vocab_size=50304),
}
