import torch.nn as nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Linear(20, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 64)
        )
        self.head = nn.Linear(64, 3)

    def forward(self, x):
        return self.head(self.backbone(x).relu())
