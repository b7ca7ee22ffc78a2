"""Predict data-parallel scaling before running it: step time, speedup and efficiency at 1 GPU, one node
and several nodes, from gradient size, link bandwidths and compute per GPU (ring all-reduce model).

The worked example of docs/07-network-arithmetic.md (2B parameters, fp32 gradients, 8 A100 per node, NVLink 3 and
HDR 200 Gbit/s, global batch 16 on 8 GPUs, activation recomputation, 50 % MFU):

    python src/predict.py --params 2B --grad_dtype fp32 --devices 8 --num_nodes 1 4 \\
        --seq_len 2048 --global_batch 16 --recompute --tflops 312 --mfu 0.5

Other inputs: --preset xl (a scalelab GPT shape), --compute_s 0.42 (a measured 1-GPU step instead of
FLOPs), --busbw_GBps 21 (a measured all-reduce busbw across nodes), --node_overhead 0 --node_doubling 0 (no share
of a step lost to a node's host or to more nodes: the link arithmetic alone), --scaling strong, --token_budget 100B
--gpu_hour_price 2.5. Under the table, the 80 % band one run's efficiency should land in (docs/12 measures how
often it does). No torch needed: pure arithmetic from scalelab.perfmodel (logic in scalelab.predict).
"""

import sys

from scalelab.predict import cli

if __name__ == "__main__":
    sys.exit(cli())
