"""PyTorch Lightning's ``sync_batchnorm=True`` on CPU through normkern's plugin: two ranks (``ddp_spawn``, gloo)
train a batch norm whose running mean after one step (momentum 1) is the mean over both ranks' batches, not one
rank's; the plugin converts the layers to normkern's SyncBatchNorm for fitting and back after."""

import copy

import lightning
import torch
from torch import nn

import normkern.torch as nt
from normkern.torch.lightning import SyncBatchNormPlugin

C = 3


def _data():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(8, C, 4, 5, generator=g) * 2 + torch.arange(C).view(1, C, 1, 1)
    return x, torch.randn(8, generator=g)


class _Model(lightning.LightningModule):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(C, momentum=1.0)
        self.head = nn.Linear(C, 1)

    def training_step(self, batch, batch_idx):
        assert isinstance(self.bn, nt.SyncBatchNorm), type(self.bn)  # fitting runs normkern's layer
        x, y = batch
        return nn.functional.mse_loss(self.head(self.bn(x).mean(dim=(2, 3))).squeeze(-1), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*_data()), batch_size=4)


def test_sync_batchnorm_true_trains_on_cpu_across_two_ranks(tmp_path):
    model = _Model()
    trainer = lightning.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", sync_batchnorm=True,
                                plugins=[SyncBatchNormPlugin()], max_steps=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                default_root_dir=tmp_path)
    trainer.fit(model)
    x, _ = _data()
    every_row = x.double().mean(dim=(0, 2, 3))
    one_rank = x[0::2].double().mean(dim=(0, 2, 3))  # the rows rank 0's sampler gives it
    assert torch.allclose(model.bn.running_mean.double(), every_row, atol=1e-5)
    assert not torch.allclose(model.bn.running_mean.double(), one_rank, atol=1e-3)
    assert int(model.bn.num_batches_tracked) == 1


def test_the_plugin_converts_and_reverts():
    model = nn.Sequential(nn.Conv2d(2, C, 3), nn.BatchNorm2d(C), nn.ReLU())
    with torch.no_grad():
        model[1].running_mean.uniform_()
    original = copy.deepcopy(model)
    weight, running_mean = model[1].weight, model[1].running_mean
    plugin = SyncBatchNormPlugin()
    converted = plugin.apply(model)
    assert isinstance(converted[1], nt.SyncBatchNorm) and converted[1].running_mean is running_mean
    reverted = plugin.revert(converted)
    assert type(reverted[1]).__name__ == "_BatchNormXd" and reverted[1].weight is weight
    x = torch.randn(4, 2, 8, 8)
    torch.testing.assert_close(reverted.eval()(x), original.eval()(x), rtol=1e-5, atol=1e-5)
