import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, n_in, n_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(n_in, 64), nn.ReLU(), nn.Linear(64, n_classes))
        self.out = nn.Softmax(dim=1)

    def forward(self, x):
        return self.out(self.body(x))
