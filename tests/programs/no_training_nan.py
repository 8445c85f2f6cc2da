# No training at all: a positional encoding that divides by zero for position 0.
import math

import torch

positions = torch.arange(0, 6, dtype=torch.float32)
scale = torch.log(positions) / math.log(10000.0)  # log(0) = -inf at position 0
encoding = torch.sin(positions * torch.exp(-scale))  # -inf * 0 -> nan
print("encoding", encoding.tolist())
