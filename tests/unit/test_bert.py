"""BERT (workloads/bert.py, nets/bert_pretraining.py): Hugging Face's BertForPreTraining by its parameter count,
its FLOPs counted to the analytic figure, its synthetic samples BERT's."""

import pytest
import torch
from torch import nn

from scalelab import config, workloads
from scalelab.train import flopcount
from scalelab.workloads.bert import SIZES, VOCAB
from scalelab.workloads.data import MaskedSentencePairs
from scalelab.workloads.nets.bert_pretraining import BertForPreTraining

# BertForPreTraining.from_config(BertConfig()) / BertConfig.from_pretrained("bert-large-uncased"): num_parameters()
PARAMS = {"base": 110_106_428, "large": 336_226_108}


def _built(size, seq=128, batch=2, world=1):
    cfg = config.parse_config(["--model", "bert", "--bert_size", size, "--bert_seq_len", str(seq)])
    return workloads.build(cfg, batch, world)


class _OnMeta(nn.Module):
    """The workload's module for a network built on the meta device (large: 336 M parameters never allocated)."""

    def __init__(self, net):
        super().__init__()
        self.model = net

    def training_step(self, batch, i):
        return self.model.loss(batch)


@pytest.mark.parametrize("size", sorted(SIZES))
def test_it_has_bert_for_pretrainings_parameters_and_its_count_is_6n_plus_attention_to_the_flop(size):
    """6 per matmul weight and token (every layer, the MLM head's dense layer and its decoder over the vocabulary);
    the pooler and next-sentence head on the first token only; 12·L·d·T² for attention's full scores."""
    with torch.device("meta"):
        module = _OnMeta(BertForPreTraining(*SIZES[size], vocab_size=VOCAB))
    assert sum(p.numel() for p in module.parameters()) == PARAMS[size]
    layers, _, d = SIZES[size]
    t = 128
    analytic = 6 * t * (layers * 12 * d * d + d * d + d * VOCAB) + 6 * (d * d + 2 * d) + 12 * layers * d * t * t
    data = MaskedSentencePairs(4, t, VOCAB, seed=0)
    assert flopcount.count(module, data, 2) == (analytic, flopcount.COUNTED)


def test_the_workload_builds_that_network_with_every_parameter_trained():
    wl = _built("base", seq=16)
    assert wl.n_params == wl.trainable_params == PARAMS["base"] and wl.tokens_per_sample == 16


def test_its_samples_are_masked_sentence_pairs_made_alike_from_their_seed_and_index():
    one, two = MaskedSentencePairs(100, 64, VOCAB, seed=3), MaskedSentencePairs(100, 64, VOCAB, seed=3)
    tokens, segments, labels, is_next = one[5]
    masked = labels != -100
    assert tokens.shape == segments.shape == labels.shape == (64,) and 0.02 < masked.float().mean() < 0.4
    assert (tokens[masked] == 103).all() and (labels[masked] >= 1000).all() and (tokens[~masked] >= 1000).all()
    assert segments.tolist() == [0] * 32 + [1] * 32 and int(is_next) == 1
    assert all(torch.equal(a, b) for a, b in zip(one[5], two[5]))


def test_a_step_gives_a_finite_loss_near_chance_at_initialisation():
    """ln(30522) + ln(2) ≈ 11: what an untrained model's two losses add up to."""
    wl = _built("base", seq=16)
    batch = [torch.stack(items) for items in zip(*(wl.train_set[i] for i in range(2)))]
    loss = wl.module.training_step(batch, 0)
    assert loss.shape == () and 9.0 < float(loss.detach()) < 13.0
