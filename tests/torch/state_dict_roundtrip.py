"""The Python side of tests/torch/state_dict_test.cc (docs/interop.md, "Python round trips").

The C++ test runs, with /usr/bin/python3 and its torch:
  forward WEIGHTS INPUT OUT   build the CNN, load WEIGHTS (a file lockstep wrote:
                              .pt through torch.load, .safetensors through the
                              safetensors package if installed), write
                              {'logits': model(INPUT)} to OUT
  make SEED INPUT WEIGHTS OUT build a seeded CNN with non-trivial BatchNorm
                              statistics, torch.save its state_dict to WEIGHTS
                              and {'logits': model(INPUT)} to OUT
  resave IN OUT               torch.save(torch.load(IN), OUT): the dtypes lockstep wrote, as Python writes them
  views OUT                   a state_dict whose tensors share one storage (views, offsets, a transpose)
"""
import collections
import sys

import torch
from torch import nn


class FashionCnn(nn.Module):
    """examples/common/fashion_cnn.h: (conv3x3 - BN - ReLU - maxpool2) x 2, then one linear layer."""

    def __init__(self, channels1=16, channels2=32):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels1, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels1)
        self.conv2 = nn.Conv2d(channels1, channels2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels2)
        self.fc = nn.Linear(channels2 * 7 * 7, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def load_weights(path):
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file  # only where the package is installed
        return load_file(path)
    return torch.load(path)


def logits(model, input_path):
    model.eval()
    with torch.no_grad():
        return model(torch.load(input_path)["input"])


def main(argv):
    torch.set_num_threads(1)
    mode = argv[1]
    if mode == "forward":
        model = FashionCnn()
        model.load_state_dict(load_weights(argv[2]))
        torch.save({"logits": logits(model, argv[3])}, argv[4])
    elif mode == "make":
        torch.manual_seed(int(argv[2]))
        model = FashionCnn()
        for bn in (model.bn1, model.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)
            bn.num_batches_tracked.fill_(7)
        torch.save(model.state_dict(), argv[4])
        torch.save({"logits": logits(model, argv[3])}, argv[5])
    elif mode == "resave":
        torch.save(torch.load(argv[2]), argv[3])
    elif mode == "views":
        base = torch.arange(12, dtype=torch.float32)
        torch.save(collections.OrderedDict(
            [("whole", base), ("middle", base[2:6].view(2, 2)), ("transposed", base.view(3, 4).t()),
             ("half", torch.arange(4, dtype=torch.bfloat16))]), argv[2])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main(sys.argv)
