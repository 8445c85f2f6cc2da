"""The BiLSTM-CRF shape: the model's forward() is a decode, called once with autograd on
before training; the loss comes from another method (`nll`), never from forward()."""
import torch
import torch.nn as nn

from _zoo import seed, watching


class Tagger(nn.Module):
    def __init__(self, vocab=12, tags=3):
        super().__init__()
        self.embed = nn.Embedding(vocab, 6)
        self.rnn = nn.GRU(6, 8, batch_first=True)
        self.emit = nn.Linear(8, tags)
        self.trans = nn.Parameter(torch.randn(tags, tags) * 0.1)

    def scores(self, words):
        h, _ = self.rnn(self.embed(words))
        return self.emit(h)[0]

    def nll(self, words, tags):
        s = self.scores(words)
        alpha = s[0]
        for t in range(1, s.shape[0]):
            alpha = torch.logsumexp(alpha.unsqueeze(1) + self.trans, 0) + s[t]
        gold = s[torch.arange(len(tags)), tags].sum() + self.trans[tags[:-1], tags[1:]].sum()
        return torch.logsumexp(alpha, 0) - gold

    def forward(self, words):
        return self.scores(words).argmax(-1)


seed(34)
data = [(torch.randint(0, 12, (1, 7)), torch.randint(0, 3, (7,))) for _ in range(4)]
model = Tagger()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
print("before", model(data[0][0]).tolist())
with watching(model, opt):
    for epoch in range(15):
        for words, tags in data:
            model.zero_grad()
            loss = model.nll(words, tags)
            loss.backward()
            opt.step()
print("nll", f"{loss.item():.4f}", "after", model(data[0][0]).tolist())
