"""DETR's set loss (Carion et al. 2020), which YOLOS trains with: each image's objects are matched
one-to-one to detection tokens by the Hungarian algorithm, then the matched tokens learn their
object's class and box and every other token learns "no object".

Matching cost per (token, object): ``class_cost * -p(object's class) + bbox_cost * L1(boxes)
+ giou_cost * -GIoU(boxes)``. Loss: cross-entropy over all tokens (the no-object class weighted
by ``eos_coefficient``), and over the matched pairs the L1 and 1 - GIoU of the boxes, both
summed and divided by the number of objects in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from scipy.optimize import linear_sum_assignment
from torch import Tensor
from torchvision.ops import box_convert, generalized_box_iou

Target = dict[str, Tensor]  # {"class_labels": (M,) int64, "boxes": (M, 4) float (cx, cy, w, h) in [0, 1]}


def pairwise_giou(boxes: Tensor, others: Tensor) -> Tensor:
    """(N, 4), (M, 4) boxes as (cx, cy, w, h) -> (N, M) generalized IoU."""
    return generalized_box_iou(box_convert(boxes, "cxcywh", "xyxy"), box_convert(others, "cxcywh", "xyxy"))


@dataclass(frozen=True)
class SetLoss:
    """The matching's cost weights, the loss's weights and the no-object class weight
    (``YolosConfig``'s / DETR's defaults)."""

    num_classes: int
    class_cost: float = 1.0
    bbox_cost: float = 5.0
    giou_cost: float = 2.0
    bbox_loss_coefficient: float = 5.0
    giou_loss_coefficient: float = 2.0
    eos_coefficient: float = 0.1

    @torch.no_grad()
    def match(self, logits: Tensor, boxes: Tensor, targets: list[Target]) -> list[tuple[Tensor, Tensor]]:
        """logits (B, Q, K + 1), boxes (B, Q, 4), one target per image -> per image (token indices
        (M,), object indices (M,)), the assignment of least total cost. The costs of every token
        against every object of the batch are one (B, Q, sum M) computation (a few large ops, not a
        few dozen small ones per image); each image's block of it is then assigned on the CPU."""
        for target in targets:
            if len(target["class_labels"]) > logits.shape[1]:
                raise ValueError(f"an image holds {len(target['class_labels'])} objects, more than the model's "
                                 f"{logits.shape[1]} detection tokens (model.net.embedder.n_detections): raise it "
                                 f"to at least {len(target['class_labels'])}")
        labels = torch.cat([t["class_labels"] for t in targets]).to(logits.device)
        true_boxes = torch.cat([t["boxes"] for t in targets]).to(boxes)
        flat_boxes = boxes.flatten(0, 1)
        cost = (self.bbox_cost * torch.cdist(flat_boxes, true_boxes, p=1)
                - self.class_cost * logits.flatten(0, 1).softmax(-1)[:, labels]
                - self.giou_cost * pairwise_giou(flat_boxes, true_boxes))
        # a diverged model's NaN / inf costs: matched last rather than crashing the assignment
        top = torch.finfo(cost.dtype).max
        cost = torch.nan_to_num(cost, nan=top, posinf=top, neginf=top).view(*logits.shape[:2], -1).cpu()
        matches = []
        for i, block in enumerate(cost.split([len(t["class_labels"]) for t in targets], dim=-1)):
            tokens, objects = linear_sum_assignment(block[i])
            matches.append((torch.as_tensor(tokens, dtype=torch.int64), torch.as_tensor(objects, dtype=torch.int64)))
        return matches

    def __call__(self, logits: Tensor, boxes: Tensor, targets: list[Target]) -> dict[str, Tensor]:
        """logits (B, Q, K + 1), boxes (B, Q, 4) (cx, cy, w, h), one target per image ->
        {"loss", "loss_ce", "loss_bbox", "loss_giou"} (scalars; ``loss`` is their weighted sum).
        An image with no objects adds only its no-object terms."""
        if len(targets) != len(logits):
            raise ValueError(f"{len(targets)} targets for a batch of {len(logits)} images")
        matches = self.match(logits, boxes, targets)
        image = torch.cat([torch.full_like(tokens, i) for i, (tokens, _) in enumerate(matches)])
        token = torch.cat([tokens for tokens, _ in matches])
        classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64, device=logits.device)
        classes[image, token] = torch.cat([t["class_labels"][o] for t, (_, o) in zip(targets, matches)]).to(logits.device)
        weight = torch.ones(self.num_classes + 1, dtype=logits.dtype, device=logits.device)
        weight[-1] = self.eos_coefficient
        loss_ce = F.cross_entropy(logits.transpose(1, 2), classes, weight)
        predicted = boxes[image, token]
        true = torch.cat([t["boxes"][o] for t, (_, o) in zip(targets, matches)]).to(predicted)
        n_objects = max(len(true), 1)
        loss_bbox = F.l1_loss(predicted, true, reduction="sum") / n_objects
        loss_giou = (1 - torch.diag(pairwise_giou(predicted, true))).sum() / n_objects
        loss = loss_ce + self.bbox_loss_coefficient * loss_bbox + self.giou_loss_coefficient * loss_giou
        return {"loss": loss, "loss_ce": loss_ce, "loss_bbox": loss_bbox, "loss_giou": loss_giou}
