"""The layers in traced graphs: ``torch.compile(fullgraph=True)`` on the eager, aot_eager and inductor backends and
``torch.export`` give the eager layers' results (outputs, gradients, running statistics: the same bits); dynamic
batch sizes compile once; every custom operator passes ``torch.library.opcheck``; and the two contract cases the
custom operators settled answer as torch.nn does."""

import copy

import pytest
import torch
from torch import nn
from torch._dynamo.testing import CompileCounterWithBackend

import normkern.torch as nt
import tiling
from normkern.torch import _ops

LAYERS = {"BatchNorm2d": lambda: nt.BatchNorm2d(3), "SyncBatchNorm": lambda: nt.SyncBatchNorm(3),
          "GroupNorm": lambda: nt.GroupNorm(1, 3),
          "BatchNorm2d momentum None": lambda: nt.BatchNorm2d(3, momentum=None),
          "BatchNorm1d no running statistics": lambda: nt.BatchNorm1d(3, track_running_stats=False)}
OPS = torch.ops.normkern


def _model(name):
    torch.manual_seed(0)
    if name.startswith("BatchNorm1d"):
        return nn.Sequential(nn.Linear(4, 3), LAYERS[name](), nn.ReLU())
    return nn.Sequential(nn.Conv2d(2, 3, 3), LAYERS[name](), nn.ReLU())


def _input(name, batch=4):
    g = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 4, generator=g) if name.startswith("BatchNorm1d") else \
        torch.randn(batch, 2, 8, 8, generator=g)


def _same(got, want, exact=True) -> None:
    """The same bits; or, where inductor compiles the layers' neighbours (the conv, the ReLU) into kernels of its own,
    float32 rounding apart."""
    if exact:
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-6)


def _same_state(a: nn.Module, b: nn.Module, exact=True) -> None:
    for x, y in zip(a.buffers(), b.buffers(), strict=True):
        _same(x, y, exact)
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert (x.grad is None) == (y.grad is None), name
        if x.grad is not None:
            _same(x.grad, y.grad, exact)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_fullgraph_compile_gives_the_eager_layers_bits(backend, name):
    torch._dynamo.reset()
    model = _model(name)
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    exact = backend != "inductor"
    for step in range(2):  # two training steps: the running statistics carried from one to the next
        x = _input(name, 4 + step)
        out, want = compiled(x), eager(x)
        _same(out, want, exact)
        out.pow(2).sum().backward()
        want.pow(2).sum().backward()
        _same_state(model, eager, exact)
    model.eval()
    eager.eval()
    x = _input(name, 3).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    out, want = compiled(x), eager(x_eager)
    _same(out, want, exact)
    out.sum().backward()
    want.sum().backward()
    _same(x.grad, x_eager.grad, exact)
    _same_state(model, eager, exact)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", ["BatchNorm2d", "SyncBatchNorm", "GroupNorm"])
def test_export_gives_the_eager_layers_outputs(name, mode):
    model = getattr(_model(name), mode)()
    eager = copy.deepcopy(model)
    program = torch.export.export(model, (_input(name),))
    assert any(str(node.target).startswith("normkern.") for node in program.graph.nodes)
    exported = program.module()
    for batch in (4, 4):
        x = _input(name, batch)
        assert torch.equal(exported(x), eager(x))
    for (key, got), (_, want) in zip(exported.named_buffers(), eager.named_buffers(), strict=True):
        assert torch.equal(got, want), key  # training mode: the exported graph updates its running statistics


def test_export_with_a_dynamic_batch():
    model = _model("BatchNorm2d").eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    program = torch.export.export(model, (_input("BatchNorm2d"),), dynamic_shapes=({0: batch},))
    for size in (2, 7, 33):
        x = _input("BatchNorm2d", size)
        assert torch.equal(program.module()(x), model(x))


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("name", ["BatchNorm2d", "SyncBatchNorm", "GroupNorm"])
def test_dynamic_batch_sizes_compile_once(name, mode):
    torch._dynamo.reset()
    model = getattr(nn.Sequential(LAYERS[name](), nn.ReLU()), mode)()
    eager = copy.deepcopy(model)
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(model, fullgraph=True, backend=counter, dynamic=True)
    compiled_once = None
    for batch in (4, 5, 9, 12):
        x = torch.randn(batch, 3, 6, 6)
        assert torch.equal(compiled(x), eager(x))
        compiled_once = compiled_once or counter.frame_count
    assert counter.frame_count == compiled_once  # no recompilation after the first batch size


def _samples():
    """ModuleInfo-like samples: contiguous, channels_last, an empty batch; float32, float16, bfloat16 with float32
    parameters."""
    for dtype, parameters in ((torch.float32, torch.float32), (torch.float16, torch.float16),
                              (torch.bfloat16, torch.float32)):
        for layout in ("contiguous", "channels_last", "empty batch"):
            x = torch.randn(0 if layout == "empty batch" else 4, 3, 5, 6).to(dtype)
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            yield pytest.param(x, parameters, id=f"{dtype}-{parameters}-{layout}".replace("torch.", ""))


@pytest.mark.parametrize("x, dtype", list(_samples()))
def test_opcheck_every_operator(x, dtype):
    c = x.shape[1]
    w, b = torch.rand(c, dtype=dtype) + 0.5, torch.rand(c, dtype=dtype)
    rm, rv, counted = torch.rand(c, dtype=dtype), torch.rand(c, dtype=dtype) + 0.5, torch.tensor(2)
    dy = torch.randn_like(x)
    grads = (x.detach().clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_())
    _, mean, invstd, _, _ = OPS.batch_norm_training(x, w, b, rm.clone(), rv.clone(), counted, 0.1, 1e-5, "host")
    _, gmean, rstd = OPS.group_norm(x, w, b, 3, 1e-5, "host")
    cases = [
        (OPS.batch_norm_training, (*grads, rm.clone(), rv.clone(), counted, 0.1, 1e-5, "host")),
        (OPS.batch_norm_training, (*grads, rm.clone(), rv.clone(), counted, None, 1e-5, "host")),
        (OPS.batch_norm_training, (*grads, None, None, None, 0.1, 1e-5, "host")),
        (OPS.batch_norm_inference, (*grads, rm, rv, 1e-5, "host")),
        (OPS.group_norm, (*grads, 3, 1e-5, "host")),
        (OPS.group_norm, (grads[0], None, None, 1, 1e-5, "host")),
        (OPS.batch_norm_training_backward, (dy, x, w, mean, invstd, 1e-5, [True, True, True], "host")),
        (OPS.batch_norm_training_backward, (dy, x, None, mean, invstd, 1e-5, [True, False, False], "host")),
        (OPS.batch_norm_inference_backward, (dy, x, w, rm, rv, 1e-5, [True, False, True], "host")),
        (OPS.group_norm_backward, (dy, x, gmean, rstd, w, 3, [True, True, True], "host")),
        (OPS.group_norm_backward, (dy, x, gmean, rstd, w, 3, [False, True, False], "host")),
    ]
    checked = {op._qualified_op_name.split("::")[1] for op, _ in cases} | set(SYNCHRONIZED)
    assert {op._name for op in _ops.OPERATORS} == checked
    for op, args in cases:
        torch.library.opcheck(op.default, args)


SYNCHRONIZED = ("sync_batch_norm_training", "sync_batch_norm_backward")


@pytest.mark.parametrize("x, dtype", [s for s in _samples() if "empty" not in s.id])
def test_opcheck_the_synchronized_operators(tmp_path, x, dtype):
    """On a gloo group of one process, started and ended here (what the collectives need to run). Its only rank
    with an empty batch leaves no statistics at all (a NaN invstd, as torch's gather gives), which opcheck's
    comparisons refuse: empty batches are the multi-process test's."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        group = _ops.group_key(dist.group.WORLD)
        c = x.shape[1]
        w, b = torch.rand(c, dtype=dtype) + 0.5, torch.rand(c, dtype=dtype)
        rm, rv, counted = torch.rand(c, dtype=dtype), torch.rand(c, dtype=dtype) + 0.5, torch.tensor(2)
        grads = (x.detach().clone().requires_grad_(), w.clone().requires_grad_(), b.clone().requires_grad_())
        _, mean, invstd, counts, _, _ = OPS.sync_batch_norm_training(x, w, b, rm.clone(), rv.clone(), counted, 0.1,
                                                                     1e-5, group, "host")
        torch.library.opcheck(OPS.sync_batch_norm_training.default,
                              (*grads, rm.clone(), rv.clone(), counted, None, 1e-5, group, "host"))
        torch.library.opcheck(OPS.sync_batch_norm_backward.default,
                              (torch.randn_like(x), x, w, mean, invstd, counts, [True, True, True], group, "host"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("cls", [nt.BatchNorm2d, nt.SyncBatchNorm])
def test_an_eval_output_backpropagated_after_a_training_step_reads_the_new_statistics(cls):
    """torch.nn's backward reads its saved buffers, which the training step updated in place: both new ones."""
    grads = []
    for layer_cls in (nn.BatchNorm2d, cls):
        torch.manual_seed(0)
        layer = layer_cls(3)
        with torch.no_grad():
            layer.running_mean.fill_(0.3)
            layer.running_var.fill_(2.0)
        x = torch.randn(4, 3, 5, 5, requires_grad=True)
        out = layer.eval()(x)
        layer.train()(torch.randn(4, 3, 5, 5) * 3 + 1)
        out.pow(2).sum().backward()
        grads.append((x.grad, layer.weight.grad, layer.bias.grad))
    for got, want in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("cls", [nt.BatchNorm1d, nt.BatchNorm2d, nt.SyncBatchNorm])
@pytest.mark.parametrize("statistic", ["running_mean", "running_var"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_running_statistic_that_requires_grad_is_refused_as_torch_does(cls, statistic, mode):
    x = torch.randn(4, 3, 5) if cls is nt.BatchNorm1d else torch.randn(4, 3, 5, 6)
    twin = {nt.BatchNorm1d: nn.BatchNorm1d, nt.BatchNorm2d: nn.BatchNorm2d, nt.SyncBatchNorm: nn.BatchNorm2d}[cls]
    for layer in (cls(3), twin(3)):
        getattr(layer, mode)()
        layer(x)  # a step bound before the statistic asks for grad is not taken afterwards
        getattr(layer, statistic).requires_grad_(True)
        before = {k: v.clone() for k, v in layer.state_dict().items()}
        with pytest.raises(RuntimeError, match=f"not differentiable with respect to argument '{statistic}'"):
            layer(x)
        if isinstance(layer, nt.SyncBatchNorm | nt.BatchNorm1d | nt.BatchNorm2d):  # normkern changes no state
            assert all(torch.equal(before[k], v) for k, v in layer.state_dict().items())
        with torch.no_grad():
            layer(x)  # in no-grad mode torch takes it


def test_a_soc_of_its_own_is_refused_under_compile_with_a_clear_error():
    soc = tiling.get_soc("host")
    import dataclasses

    layer = nt.BatchNorm2d(3, soc=dataclasses.replace(soc, vector_cores=1))
    layer(torch.randn(4, 3, 5, 5))  # eager: any SocSpec
    torch._dynamo.reset()
    with pytest.raises(Exception, match="the soc must be a preset's name"):
        torch.compile(layer, fullgraph=True, backend="eager")(torch.randn(4, 3, 5, 5))


def _ranks_worker(rank, world, init_file, out_dir):
    import datetime

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    try:
        results = {}
        for group_kind in ("default", "new_group"):
            group = None if group_kind == "default" else dist.new_group(list(range(world)))
            for backend in ("eager", "aot_eager", "inductor"):
                torch._dynamo.reset()
                model, eager = (nn.Sequential(nn.Conv2d(2, 3, 3), nt.SyncBatchNorm(3, process_group=group), nn.ReLU())
                                for _ in range(2))
                eager.load_state_dict(model.state_dict())  # a layer holding a process group does not deepcopy
                compiled = torch.compile(model, fullgraph=True, backend=backend)
                # the last step: rank 1's batch empty (not under inductor, whose conv backward of an empty batch fails
                # in PyTorch 2.13 without any normkern layer)
                batches = (3 + rank, 4) if backend == "inductor" else (3 + rank, 4, 0 if rank else 5)
                for step, rows in enumerate(batches):
                    x = torch.randn(rows, 2, 8, 8, generator=torch.Generator().manual_seed(10 * rank + step))
                    out, want = compiled(x), eager(x)
                    _same(out, want, backend != "inductor")
                    out.pow(2).sum().backward()
                    want.pow(2).sum().backward()
                    _same_state(model, eager, backend != "inductor")
                results[(group_kind, backend)] = True
        torch.save(results, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_fullgraph_compile_across_ranks_gives_the_eager_layers_bits(tmp_path):
    """Two gloo ranks: the synchronized batch norm's collectives run inside its custom operators, on the default
    group and on one of ``new_group``."""
    import torch.multiprocessing as mp

    mp.spawn(_ranks_worker, args=(2, str(tmp_path / "rendezvous"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        assert len(torch.load(tmp_path / f"rank{rank}.pt")) == 6


@pytest.mark.parametrize("attribute, values", [("momentum", (0.1, 0.5, None)), ("eps", (1e-5, 1e-3))])
def test_a_changed_hyperparameter_gives_the_eager_layers_bits(attribute, values):
    """Dynamo guards on the layer's attributes and retraces; the operators bind a step per value."""
    torch._dynamo.reset()
    model, eager = nt.BatchNorm2d(3), nt.BatchNorm2d(3)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    for value in values:
        setattr(model, attribute, value)
        setattr(eager, attribute, value)
        x = torch.randn(4, 3, 5, 5)
        assert torch.equal(compiled(x), eager(x))
        _same_state(model, eager)


@pytest.mark.parametrize("name", ["BatchNorm2d", "SyncBatchNorm", "GroupNorm"])
def test_inductor_gives_the_bits_of_the_layers_alone(name):
    """With nothing beside it for inductor to compile, a layer's outputs, gradients and statistics are eager's."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = LAYERS[name]()
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, fullgraph=True, backend="inductor")
    for mode in ("train", "eval"):
        getattr(model, mode)()
        getattr(eager, mode)()
        x = (torch.randn(4, 3, 6, 7) * 2 + 1).contiguous(memory_format=torch.channels_last)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, want = compiled(xa), eager(xb)
        assert torch.equal(out, want) and out.stride() == want.stride()
        dy = torch.randn_like(out)
        out.backward(dy)
        want.backward(dy)
        assert torch.equal(xa.grad, xb.grad) and xa.grad.stride() == xb.grad.stride()
        _same_state(model, eager)


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_an_eval_output_backpropagated_after_a_training_step_answers_as_torch_nn_under_compile(backend):
    """Eager Dynamo: both running statistics new, as torch.nn's; AOT backends: torch.nn's compiled graph refuses the
    buffers modified in place since, and so does normkern's, with the same error."""
    answers = []
    for cls in (nn.BatchNorm2d, nt.BatchNorm2d):
        torch._dynamo.reset()
        torch.manual_seed(0)
        layer = cls(3)
        with torch.no_grad():
            layer.running_mean.fill_(0.3)
            layer.running_var.fill_(2.0)
        compiled = torch.compile(layer, backend=backend)
        x = torch.randn(4, 3, 5, 5, requires_grad=True)
        layer.eval()
        out = compiled(x)
        layer.train()
        compiled(torch.randn(4, 3, 5, 5) * 3 + 1)
        try:
            out.pow(2).sum().backward()
            answers.append(x.grad)
        except RuntimeError as error:
            answers.append(str(error).split(":")[0])
    if isinstance(answers[0], str):
        refused = "one of the variables needed for gradient computation has been modified by an inplace operation"
        assert answers[1] == answers[0] == refused
    else:
        torch.testing.assert_close(answers[1], answers[0])
