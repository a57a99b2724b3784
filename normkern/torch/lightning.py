"""PyTorch Lightning's ``sync_batchnorm=True`` on CPU, through normkern's SyncBatchNorm.

Lightning's own plugin converts the model's batch norms to ``torch.nn.SyncBatchNorm``, which refuses CPU tensors;
this one converts them to ``normkern.torch.SyncBatchNorm`` (gloo or any process group) and back after fitting::

    trainer = lightning.Trainer(accelerator="cpu", devices=2, strategy="ddp", sync_batchnorm=True,
                                plugins=[normkern.torch.lightning.SyncBatchNormPlugin()])

It is a ``TorchSyncBatchNorm`` (Lightning's plugin class), so Lightning takes it beside ``sync_batchnorm=True``.
Needs Lightning (``lightning`` or ``pytorch_lightning``).
"""

from __future__ import annotations

from torch import nn

from .batchnorm import SyncBatchNorm, _LocalBatchNorm, take_state

try:
    from lightning.pytorch.plugins.layer_sync import TorchSyncBatchNorm
except ImportError:  # the standalone package
    try:
        from pytorch_lightning.plugins.layer_sync import TorchSyncBatchNorm
    except ImportError as exc:
        raise ImportError("normkern.torch.lightning needs PyTorch Lightning: pip install lightning") from exc


class SyncBatchNormPlugin(TorchSyncBatchNorm):
    """Lightning's layer-sync plugin with normkern's SyncBatchNorm: ``apply`` converts every batch norm layer
    (``SyncBatchNorm.convert_sync_batchnorm``, planning for ``soc``), ``revert`` turns them back into local batch
    norms (normkern's, of any rank, as Lightning's own plugin reverts to a batch norm of any rank)."""

    def __init__(self, soc="host") -> None:
        self.soc = soc

    def apply(self, model: nn.Module) -> nn.Module:
        return SyncBatchNorm.convert_sync_batchnorm(model, soc=self.soc)

    def revert(self, model: nn.Module) -> nn.Module:
        converted = model
        if isinstance(model, SyncBatchNorm):
            converted = take_state(_BatchNormXd(model.num_features, model.eps, model.momentum, model.affine,
                                                model.track_running_stats, bias=model.bias is not None, soc=model.soc),
                                   model)
        for name, child in model.named_children():
            converted.add_module(name, self.revert(child))
        return converted


class _BatchNormXd(_LocalBatchNorm):
    """A local batch norm of any rank (what a reverted SyncBatchNorm becomes: its rank is not recorded)."""

    def _check_input_dim(self, input) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")


__all__ = ["SyncBatchNormPlugin"]
