"""Zoo models as test cases: every (model, dataset), or each architecture once.

The llvm backend (the one users run on CPUs) is checked on `EVERY` case; the TVM targets, whose
kernels are TVM's and differ between the two datasets only in their shapes, on `EACH_ONCE`: each
architecture at one dataset, the datasets taken in turn down the list so that both stems (cifar10's
3x3 conv, imagenet's 7x7/2 conv and 3x3/2 max pool) are among them:

    densenet121-cifar10, densenet161-imagenet, mobilenet_v2-cifar10, resnet18-imagenet, ...
"""

from __future__ import annotations

import nasir.zoo as zoo

EVERY = [(name, dataset) for name in zoo.names() for dataset in zoo.datasets(name)]
EACH_ONCE = [(name, zoo.datasets(name)[i % len(zoo.datasets(name))]) for i, name in enumerate(zoo.names())]
