"""A style loss whose Gram matrices are taken under float16 autocast, normalised after the product."""

import torch
import torch.nn as nn

torch.manual_seed(16)


def gram(features):
    b, c, hw = features.shape
    return torch.bmm(features, features.transpose(1, 2)) / (c * hw)


encoder = nn.Conv1d(3, 32, 3, padding=1)
style = torch.randn(2, 3, 512) * 30
image = torch.randn(2, 3, 512, requires_grad=True)
opt = torch.optim.Adam([image, *encoder.parameters()], lr=1e-3)
for step in range(20):
    with torch.autocast("cpu", dtype=torch.float16):
        g_img = gram(encoder(image))
        g_sty = gram(encoder(style))
    loss = (g_img.float() - g_sty.float()).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final {loss.item():.4f}")
