# SPDX-License-Identifier: MIT
# kt_kernel_usage.py - a script written for KT-Kernel, after the usage
# example of its README; test_kt.py runs it against kt by changing only
# the import line below. WEIGHT_PATH names the converted weights.
import os

import torch
from kt_kernel import KTMoEWrapper

weight_path = os.environ["WEIGHT_PATH"]
num_experts, top_k, hidden, inter = 8, 2, 256, 256

# Initialize the MoE wrapper
wrapper = KTMoEWrapper(
    layer_idx=1,
    num_experts=num_experts,
    num_experts_per_tok=top_k,
    hidden_size=hidden,
    moe_intermediate_size=inter,
    num_gpu_experts=2,
    cpuinfer_threads=2,
    threadpool_count=2,
    weight_path=weight_path,
    chunked_prefill_size=512,
    method="AMXINT8",
)

# Load weights
physical_to_logical_map = torch.arange(num_experts, dtype=torch.int64)
wrapper.load_weights(physical_to_logical_map)

# Run inference
cuda_stream = (torch.cuda.current_stream().cuda_stream
               if torch.cuda.is_available() else None)
hidden_states = torch.randn(4, hidden, dtype=torch.bfloat16)
scores = torch.softmax(torch.randn(4, num_experts), dim=-1)
topk_weights, topk_ids = torch.topk(scores, top_k, dim=-1)
output = wrapper.forward(hidden_states, topk_ids, topk_weights.float(),
                         cuda_stream)
assert output.shape == hidden_states.shape, output.shape
assert output.dtype == hidden_states.dtype, output.dtype
assert torch.isfinite(output.float()).all()
print("usage: output", tuple(output.shape), output.dtype,
      "sum %.6f" % output.float().abs().sum().item())
