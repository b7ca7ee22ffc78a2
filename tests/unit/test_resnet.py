"""ResNet-50 (workloads/resnet.py, nets/resnet50.py): torchvision's network by its published figures, its FLOPs
counted, its wire bytes the gradients of every parameter."""

import torch

from scalelab import config, workloads
from scalelab.train import comm, flopcount

# torchvision.models.ResNet50_Weights.IMAGENET1K_V1.meta: "num_params" 25,557,032, "_ops" 4.089 (G multiply-adds)
PARAMS, GMACS = 25_557_032, 4.089


def _built(*argv, batch=2):
    cfg = config.parse_config(["--model", "resnet50", *argv])
    return workloads.build(cfg, batch, 1)


def test_it_has_torchvisions_parameters_and_its_gradients_are_what_ddp_sends():
    wl = _built()
    assert wl.n_params == wl.trainable_params == PARAMS
    assert comm.grad_bytes(wl.module) == 4 * PARAMS  # fp32 gradients: 102.2 MB a step at every image size
    assert _built("--num_classes", "10").n_params == PARAMS - 2048 * 990 - 990


def test_its_counted_flops_at_224_are_three_forwards_of_torchvisions_multiply_adds_less_one_input_gradient():
    """2 FLOPs a multiply-add; backward twice the forward, but the stem's input gradient (3 -> 64 channels, 7x7, at
    112² outputs) is never computed: the images need none."""
    wl = _built()
    counted, how = flopcount.count(wl.module, wl.train_set, 2)
    stem = 112 * 112 * 64 * 3 * 7 * 7  # the stem's multiply-adds
    forward = (counted + 2 * stem) / 3
    assert how == flopcount.COUNTED and abs(forward / 2e9 - GMACS) / GMACS < 0.01, forward
    assert abs(counted / (3 * 2 * GMACS * 1e9) - 1) < 0.05  # the 5 %: 24.3 GFLOPs a training sample


def test_its_images_are_imagenet_shaped_seeded_and_the_same_at_every_world_size():
    one, two = _built("--image_size", "64"), workloads.build(config.parse_config(
        ["--model", "resnet50", "--image_size", "64"]), 2, 2)
    image, label = one.train_set[70]
    assert image.shape == (3, 64, 64) and 0 <= int(label) < 1000 and len(one.train_set) == 8192
    assert torch.equal(image, two.train_set[70][0]) and torch.equal(image, one.train_set[70 % 64][0])
