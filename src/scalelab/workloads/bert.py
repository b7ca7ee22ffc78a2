"""BERT, declared: `--model bert`, the other model published data-parallel tables use (chapter 12): base or large,
pre-trained from its initialisation on synthetic masked sentence pairs (data.MaskedSentencePairs).

The network is nets/bert_pretraining.py (Hugging Face's BertForPreTraining, layer for layer). Its FLOPs per sample
are counted by torch on one step (train/flopcount.py): 6 per matmul weight and token, the masked-LM head's decoder
over the whole vocabulary at every position included, plus the full T x T attention. Torch-free until build().
"""

from scalelab.entry import bounded
from scalelab.workloads.spec import Option, Workload, WorkloadSpec

SIZES = {"base": (12, 12, 768), "large": (24, 16, 1024)}  # layers, heads, width (Devlin et al. 2019, table 1)
VOCAB = 30522  # BERT's uncased WordPiece vocabulary


def build(cfg, batch_per_device: int, world_size: int) -> Workload:
    import lightning.pytorch as pl
    import torch

    from scalelab.workloads.data import MaskedSentencePairs
    from scalelab.workloads.nets import fused_optimizer
    from scalelab.workloads.nets.bert_pretraining import BertForPreTraining

    class Bert(pl.LightningModule):
        def __init__(self, learning_rate: float):
            super().__init__()
            self.model = BertForPreTraining(*SIZES[cfg.bert_size], vocab_size=VOCAB)
            self.learning_rate = learning_rate

        def training_step(self, batch, batch_idx):
            return self.model.loss(batch)

        def configure_optimizers(self):  # Adam(W) at 1e-4, weight decay 0.01 (Devlin et al.; LAMB for huge batches)
            return torch.optim.AdamW(self.parameters(), lr=self.learning_rate, weight_decay=0.01,
                                     fused=fused_optimizer(self.device))

    module = Bert(cfg.learning_rate)
    steps = (cfg.max_steps or 1000) * cfg.accumulate_grad_batches
    num_samples = cfg.num_samples or steps * batch_per_device * world_size
    return Workload(
        module=module,
        train_set=MaskedSentencePairs(num_samples, cfg.bert_seq_len, VOCAB, cfg.seed),
        val_set=None,
        n_params=sum(p.numel() for p in module.parameters()),  # the tied decoder counted once
        tokens_per_sample=cfg.bert_seq_len,
        describe=f"bert {cfg.bert_size}",
        flops_per_sample=None,  # counted on one step (train/flopcount.py)
        trainable_params=sum(p.numel() for p in module.parameters() if p.requires_grad),
    )


SPEC = WorkloadSpec(
    name="bert",
    help="bert: BERT pre-training (masked LM + next sentence), base or large, on synthetic sentence pairs",
    defaults={"batch_size": 32, "learning_rate": 1e-4, "max_epochs": None, "max_steps": 30},
    options=(
        Option("bert_size", "base", {"choices": sorted(SIZES), "help": "BERT size (bert): base 110M, large 336M"}),
        Option("bert_seq_len", 128, {"type": bounded(int, 8, 512, "tokens; BERT's positions"),
                                     "help": "tokens a sample (bert; 128 as pre-training's phase 1, 512 phase 2)"}),
    ),
    identity=("bert_size", "bert_seq_len"),
    build=build,
    gpu_precision="bf16-mixed",
)
