"""The network of `--model bert` (declared in workloads/bert.py): BERT as Devlin et al. 2019 pre-train it, shaped
as Hugging Face's `BertForPreTraining` (110,106,428 parameters for base, 336,226,108 for large: tested), written
here so no library or weights are downloaded.

Post-LN encoder layers (attention, then the 4x MLP with GELU, each added to its input and then normalised),
word + position + segment embeddings, the masked-LM head (a dense layer, GELU, LayerNorm, the decoder tied to the
word embeddings) over every position, and the next-sentence head on the pooled first token.
"""

import torch
import torch.nn.functional as F
from torch import nn

from scalelab.workloads.nets.transformer import SelfAttention

IGNORE = -100  # a position that is not masked: no MLM loss (F.cross_entropy's ignore_index)


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, n_head: int, dropout: float = 0.1):
        super().__init__()
        self.attn, self.ln1 = SelfAttention(d_model, n_head, dropout), nn.LayerNorm(d_model, eps=1e-12)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.ln2, self.drop = nn.LayerNorm(d_model, eps=1e-12), nn.Dropout(dropout)

    def forward(self, x):
        x = self.ln1(x + self.drop(self.attn(x)))
        return self.ln2(x + self.drop(self.mlp(x)))


class BertForPreTraining(nn.Module):
    def __init__(self, n_layer: int, n_head: int, d_model: int, vocab_size: int = 30522, max_positions: int = 512):
        super().__init__()
        self.word = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_positions, d_model)
        self.segment = nn.Embedding(2, d_model)
        self.ln_emb, self.drop = nn.LayerNorm(d_model, eps=1e-12), nn.Dropout(0.1)
        self.layers = nn.ModuleList(EncoderLayer(d_model, n_head) for _ in range(n_layer))
        self.pooler = nn.Linear(d_model, d_model)
        self.mlm_dense, self.mlm_ln = nn.Linear(d_model, d_model), nn.LayerNorm(d_model, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))  # the decoder's weight is the word embedding's
        self.nsp = nn.Linear(d_model, 2)
        self.apply(self._init)

    @staticmethod
    def _init(module):  # BERT's: normal(0, 0.02), biases zero
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens, segments):
        t = tokens.shape[1]
        x = self.word(tokens) + self.pos(torch.arange(t, device=tokens.device)) + self.segment(segments)
        x = self.drop(self.ln_emb(x))
        for layer in self.layers:
            x = layer(x)
        mlm = F.linear(self.mlm_ln(F.gelu(self.mlm_dense(x))), self.word.weight, self.mlm_bias)
        return mlm, self.nsp(torch.tanh(self.pooler(x[:, 0])))

    def loss(self, batch):
        """Masked-LM loss over the masked positions plus the next-sentence loss, as BERT pre-trains."""
        tokens, segments, labels, is_next = batch
        mlm, nsp = self(tokens, segments)
        return (F.cross_entropy(mlm.view(-1, mlm.size(-1)), labels.reshape(-1), ignore_index=IGNORE)
                + F.cross_entropy(nsp, is_next))
