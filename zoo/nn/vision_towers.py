"""Vision towers for a vision-language model: images -> a sequence of feature vectors.

LLaVA reads its vision encoder at an inner layer (by default the second-to-last,
``vision_feature_layer=-2``) and drops the CLS vector. :class:`VisionTower` does
that for a zoo ViT tower (a :class:`~zoo.nn.tower.Tower` of a PatchEmbedder and Blocks: the
``zoo.models.model.Model`` that ``model=vit`` trains); :class:`TimmVisionTower` for a timm backbone.
The zoo tower keeps only the layers it reads: the ones after ``feature_layer`` (and the final
norm) are dropped once the language model around it has drawn its initial weights, so no
parameter goes without a gradient.
"""

from __future__ import annotations

from torch import Tensor, nn

from zoo.nn.tower import Tower


def layer_index(feature_layer: int, n_layers: int) -> int:
    """LLaVA's ``vision_feature_layer`` -> how many Blocks to run. The hidden states are
    [embeddings, block 1, ..., block n], so -1 = the last Block's output, 0 = the embeddings."""
    index = feature_layer if feature_layer >= 0 else n_layers + 1 + feature_layer
    if not 0 <= index <= n_layers:
        raise ValueError(f"feature_layer={feature_layer} is outside a vision stack of {n_layers} layers")
    return index


class VisionTower(nn.Module):
    """A zoo ViT tower read at ``feature_layer``, CLS dropped unless ``keep_cls``.

    Args:
        model: the ViT tower (``embedder`` = PatchEmbedder); a Model's head is unused. It is
            renamed ``vision`` and reads out at ``feature_layer``.
        image_size: the side of the square images it takes (must be the PatchEmbedder's).
        feature_layer: LLaVA's ``vision_feature_layer`` (see :func:`layer_index`).
        keep_cls: keep the CLS vector (LLaVA's ``vision_feature_select_strategy="full"``).
    """

    def __init__(self, model: Tower, image_size: int, feature_layer: int = -2, keep_cls: bool = False):
        super().__init__()
        if model.embedder.image_size != image_size:
            raise ValueError(f"vision tower image_size={image_size} but its PatchEmbedder takes {model.embedder.image_size}")
        self.model, self.image_size = model, image_size
        model.name = "vision"
        model.read_at(layer_index(feature_layer, len(model.blocks)))
        self.n_dropped = 0 if keep_cls or model.embedder.cls is None else 1
        self.n_tokens = model.embedder.n_patches + int(model.embedder.cls is not None) - self.n_dropped
        self.d_out = model.embedder.patchify.out_channels

    def forward(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> features (B, n_tokens, d_out)."""
        return self.model.hidden(images)[:, self.n_dropped :]


class TimmVisionTower(nn.Module):
    """A timm backbone (``timm.create_model(name, pretrained=False)``, optionally loaded
    from a local ``checkpoint``) read at block ``feature_layer``, prefix tokens dropped."""

    def __init__(self, name: str, image_size: int, feature_layer: int = -2, checkpoint: str | None = None,
                 **kwargs):
        super().__init__()
        import timm

        self.model = timm.create_model(name, pretrained=False, num_classes=0, img_size=image_size,
                                       checkpoint_path=checkpoint or "", **kwargs)
        if not hasattr(self.model, "forward_intermediates"):
            raise ValueError(f"timm model {name!r} has no forward_intermediates: pick a ViT-style backbone")
        self.image_size, self.feature_layer = image_size, feature_layer
        self.d_out = self.model.num_features
        self.n_tokens = self.model.patch_embed.num_patches

    def forward(self, images: Tensor) -> Tensor:
        """images (B, C, H, W) -> features (B, n_tokens, d_out)."""
        return self.model.forward_intermediates(
            images, indices=[self.feature_layer], intermediates_only=True, output_fmt="NLC")[0]
