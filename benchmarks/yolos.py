"""zoo YOLOS vs transformers YolosForObjectDetection: detection training step time and peak
memory at the same shape, each side computing DETR's set loss for the same targets.

    python benchmarks/yolos.py                # 64 px / patch 8, 10 detection tokens, 4 layers, 128 wide, batch 32
    python benchmarks/yolos.py --image 512 --layers 12 --width 384 --heads 6 --detections 100 --batch 2   # YOLOS-S-like

The zoo net is conf/model/yolos.yaml reshaped to the Hugging Face config (the converter's
yolos_net; ``use_mid_position_embeddings=False``, the variant it converts), as
tests/test_yolos_convert.py does: both are the same network. The loss is each side's own:
the zoo's zoo.objectives.set_loss.SetLoss and the one ``YolosForObjectDetection(labels=...)``
returns (plus its no-grad cardinality error), with the same matching costs and loss weights
(YolosConfig's defaults). Both match with scipy's Hungarian algorithm on the CPU, once per image
per step, inside the timed step.
"""

from __future__ import annotations

import argparse

import torch

from common import add_run_args, compare, make_step, peer

peer("scipy")  # both set losses match with scipy.optimize.linear_sum_assignment
transformers = peer("transformers")

from zoo.convert.yolos import yolos_net  # noqa: E402  (imports scipy: checked above)
from zoo.objectives.set_loss import SetLoss  # noqa: E402


def random_targets(batch: int, max_objects: int, classes: int, device: str) -> list[dict[str, torch.Tensor]]:
    """Per image 1..max_objects objects: a class and a box (cx, cy, w, h) inside the image."""
    targets = []
    for n in torch.randint(1, max_objects + 1, (batch,)).tolist():
        size = 0.1 + 0.3 * torch.rand(n, 2)
        centre = size / 2 + (1 - size) * torch.rand(n, 2)
        targets.append({"class_labels": torch.randint(0, classes, (n,), device=device),
                        "boxes": torch.cat([centre, size], dim=1).to(device)})
    return targets


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image", type=int, default=64)
    p.add_argument("--patch", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--detections", type=int, default=10, help="detection tokens")
    p.add_argument("--objects", type=int, default=5, help="the most objects per image (each image gets 1..this many)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch", type=int, default=32)
    add_run_args(p)
    a = p.parse_args()
    if a.objects > a.detections:
        raise SystemExit(f"--objects {a.objects} > --detections {a.detections}: each object needs a detection token")
    torch.manual_seed(0)
    cfg = transformers.YolosConfig(
        image_size=[a.image, a.image], patch_size=a.patch, hidden_size=a.width, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, intermediate_size=4 * a.width, num_detection_tokens=a.detections,
        use_mid_position_embeddings=False, num_labels=a.classes, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    x = torch.randn(a.batch, 3, a.image, a.image, device=a.device)
    targets = random_targets(a.batch, a.objects, a.classes, a.device)

    def zoo():
        net = yolos_net(cfg.to_dict()).to(a.device).train()
        set_loss = SetLoss(a.classes, class_cost=cfg.class_cost, bbox_cost=cfg.bbox_cost, giou_cost=cfg.giou_cost,
                           bbox_loss_coefficient=cfg.bbox_loss_coefficient,
                           giou_loss_coefficient=cfg.giou_loss_coefficient, eos_coefficient=cfg.eos_coefficient)

        def loss():
            out = net(x)
            return set_loss(out.logits, out.boxes, targets)["loss"]

        return make_step(net, loss, a.dtype, compile=a.compile)

    def hf():
        ref = transformers.YolosForObjectDetection(cfg).to(a.device).train()
        return make_step(ref, lambda: ref(pixel_values=x, labels=targets).loss, a.dtype, compile=a.compile)

    tokens = (a.image // a.patch) ** 2 + 1 + a.detections
    shape = (f"{a.layers} layers, {a.width} wide, {a.heads} heads, patch {a.patch} on {a.image} px, "
             f"{a.detections} detection tokens ({tokens} in all), {sum(len(t['boxes']) for t in targets)} objects, "
             f"batch {a.batch}")
    compare("yolos", shape, "zoo YOLOS", zoo, {"YolosForObjectDetection": hf}, a)


if __name__ == "__main__":
    main()
