"""Zoo models as test cases for the TVM targets: each architecture once.

The llvm backend (the one users run on CPUs) is checked on every (model, dataset) at both widths
(test_llvm_zoo.py); the TVM targets, whose kernels are TVM's and differ between the two datasets
only in their shapes, on `EACH_ONCE`: each architecture at one dataset, the datasets taken in turn down the list so that both stems (cifar10's
3x3 conv, imagenet's 7x7/2 conv and 3x3/2 max pool) are among them, and densenet161 left to
densenet121 (the same layers, wider and deeper: two minutes of CI for no new kernel kind):

    densenet121-cifar10, mobilenet_v2-imagenet, resnet18-cifar10, resnet34-imagenet, ...
"""

from __future__ import annotations

import nasir.zoo as zoo

SAME_LAYERS_AS = {"densenet161": "densenet121"}
"""Architectures `EACH_ONCE` leaves out -> the architecture of the same layers it keeps."""
EACH_ONCE = [(name, zoo.datasets(name)[i % len(zoo.datasets(name))])
             for i, name in enumerate(n for n in zoo.names() if n not in SAME_LAYERS_AS)]
