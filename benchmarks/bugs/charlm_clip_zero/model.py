import torch.nn as nn


class CharLSTM(nn.Module):
    def __init__(self, vocab: int, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.lstm = nn.LSTM(16, width, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids):
        out, _ = self.lstm(self.embed(ids))
        return self.head(out)
