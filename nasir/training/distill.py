"""Distillation from a trained original: the loss a transformed network trains against.

A student (the transformed network) learns from the teacher (the trained original) two ways, as
BlockSwap and Moonshine train their cheap networks:

- Hinton's knowledge distillation on the outputs: the student's softened distribution is pulled
  towards the teacher's, at temperature T, beside the cross-entropy with the labels:

      kd = alpha * T^2 * KL(softmax(t / T) || softmax(s / T)) + (1 - alpha) * CE(s, y)

  (KL averaged over the batch; T^2 keeps the gradient's scale as T changes);
- attention transfer (Zagoruyko & Komodakis, ICLR 2017) at the block outputs both networks share:
  each activation A (batch, C, H, W) becomes its spatial attention map, the channel mean of A^2
  flattened and L2-normalised per example, and the student's maps are pulled towards the
  teacher's:

      at(A) = normalize(mean_c(A^2).flatten(1))       at_loss = mean((at(S) - at(T))^2)
      loss = kd + beta / 2 * sum over block outputs of at_loss

  with the authors' beta = 1000.

Block outputs (`block_outputs`) are the joins of the student's graph (a residual add, a concat:
an op that reads two or more activations) that the teacher has under the same layer name with the
same spatial size. Architecture transforms keep layer names and the shapes at block boundaries
(a channel bottleneck refuses to reach one), so on the zoo's ResNets every residual add matches.

    spec = Distillation(teacher_model)         # nasir.train(student, data, teacher=teacher_model)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from nasir.dialects import nn
from nasir.dialects.module import main_func, weights_of
from nasir.dialects.shapes import shape_of
from nasir.model import Model

TEMPERATURE = 4.0
ALPHA = 0.9
BETA = 1000.0


@dataclass(frozen=True)
class Distillation:
    """What a student learns from `teacher` (a trained `Model`): outputs at `temperature` with
    weight `alpha`, attention maps with weight `beta` (0: none)."""

    teacher: Model
    temperature: float = TEMPERATURE
    alpha: float = ALPHA
    beta: float = BETA

    def fingerprint(self) -> dict:
        """What a resumed run must share with the one that saved its checkpoint: the teacher's
        network and weights, and the loss's constants."""
        digest = hashlib.sha256(self.teacher.text().encode())
        for name, array in sorted(weights_of(self.teacher.module).items()):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(array, np.float32).tobytes())
        return {"teacher": digest.hexdigest(), "temperature": self.temperature, "alpha": self.alpha,
                "beta": self.beta}


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, labels: torch.Tensor,
            temperature: float = TEMPERATURE, alpha: float = ALPHA) -> torch.Tensor:
    """Hinton's loss (module docstring): soft targets at `temperature` beside the labels."""
    t = temperature
    soft = F.kl_div(F.log_softmax(student_logits / t, dim=1), F.softmax(teacher_logits / t, dim=1),
                    reduction="batchmean")
    return alpha * t * t * soft + (1 - alpha) * F.cross_entropy(student_logits, labels)


def attention_map(activation: torch.Tensor) -> torch.Tensor:
    """The spatial attention of a (batch, C, H, W) activation: mean over channels of its square,
    flattened and L2-normalised per example."""
    return F.normalize(activation.pow(2).mean(1).flatten(1), dim=1)


def at_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Mean squared difference of the two activations' attention maps."""
    return (attention_map(student) - attention_map(teacher)).pow(2).mean()


def block_outputs(student: Model, teacher: Model) -> list[str]:
    """Layer names of the student's joins (ops that read two or more activations) with a 4-D
    result that the teacher has too, at the same spatial size (see the module docstring)."""
    def joins(model: Model) -> dict[str, tuple[int, ...]]:
        out = {}
        for op in main_func(model.module).body.block.ops:
            name = getattr(op, "layer_name", "")
            data = [v for v in op.operands if not isinstance(v.owner, nn.WeightOp)]
            if name and len(data) >= 2 and op.results and len(shape := shape_of(op.results[0])) == 4:
                out[name] = shape[2:]
        return out

    ours, theirs = joins(student), joins(teacher)
    return [name for name, hw in ours.items() if theirs.get(name) == hw]


def distillation_loss(student_logits: torch.Tensor, student_taps: dict[str, torch.Tensor],
                      teacher_logits: torch.Tensor, teacher_taps: dict[str, torch.Tensor],
                      labels: torch.Tensor, spec: Distillation) -> torch.Tensor:
    """The whole loss of the module docstring for one batch."""
    loss = kd_loss(student_logits, teacher_logits, labels, spec.temperature, spec.alpha)
    if spec.beta and student_taps:
        loss = loss + spec.beta / 2 * sum(at_loss(student_taps[k], teacher_taps[k]) for k in student_taps)
    return loss
