"""nasir.training: train a network nasir found, with the papers' recipe, on the torch backend.

Fisher Potential judges a candidate at initialisation; accuracy after training is the evidence.
`train` runs `Model.to_torch()` (at the training batch, `Model.at_batch`) through SGD and
returns a `TrainResult` whose trained weights go back into any batch of the same network:

    result = nasir.train(model, "cifar-10-batches-bin/", epochs=200, out="runs/train")
    result.accuracy                       # top-1 on the test split, batch-norm in eval mode
    trained = result.apply_to(model)      # a nasir.Model with the trained weights (compile it)

The rooms: `loop` (the recipe and the epochs), `distill` (the loss against a trained teacher:
`train(student, data, teacher=original)`), `checkpoint` (one file per run, resumable after a kill),
`report` (progress, metrics.csv, curves.png).
"""

from nasir.training.distill import Distillation
from nasir.training.loop import Recipe, TrainResult, train

__all__ = ["Distillation", "Recipe", "TrainResult", "train"]
