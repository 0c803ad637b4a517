"""Multi-process training on CPU (gloo): DDP over the implicit layer gives the single-process
gradient; ``torchrun ... mcnet_basicsr/train.py --launcher pytorch`` trains,
checkpoints on rank 0 and validates; ``--auto_resume`` continues a killed distributed run; ``--launcher slurm`` under
an emulated srun."""
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import REPO_ROOT, repo_env
from test_pipeline import dump_option, newest_log, tiny_train_option, workspace  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow  # multi-process training runs

# `torchrun` is this module's console script; run it with this interpreter (a torchrun on PATH may be another's)
TORCHRUN = [sys.executable, '-m', 'torch.distributed.run']
needs_torchrun = pytest.mark.skipif(importlib.util.find_spec('torch.distributed.run') is None,
                                    reason='torchrun (torch.distributed.run) is not available in this torch build')
needs_gloo = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason='torch built without torch.distributed/gloo')

WORLD = 2


# ---------------------------------------------------------------- (a) DDP gradient == one-process gradient
def _tiny_layer(folder, **options):
    """The tiny layer of _save_tiny_problem, float64, with tight solves; ``options`` add arch options (eps_rms)."""
    from basicsr.archs import build_network

    import mcnet_basicsr  # noqa: F401
    tight = {'solver': 'anderson', 'm': 5, 'tol': 1e-11, 'max_iter': 300}
    net = build_network({
        'type': 'MCNetArch',
        'backbone': {'net': {'type': 'SRCNN', 'num_feat': [8, 4]}, 'path': str(folder / 'srcnn.pth'),
                     'input': 'upsampled', 'channels': 1},
        'operator': {'type': 'bicubic', 'scale': 2}, 'beta': 0.05,
        'denoiser': {'depth': 3, 'num_feat': 8, 'sn_grid': 8},
        'settings': {'solver': {'forward': tight, 'backward': tight}},
        **options})
    net.load_state_dict(torch.load(folder / 'layer.pth'))  # the same weights (and power-iteration start) everywhere
    return net.double()


def _save_tiny_problem(folder):
    """The files the workers and _tiny_layer read: a random SRCNN backbone, the layer's initial weights and one batch;
    returns the batch (lr, gt)."""
    from basicsr.archs import build_network

    import mcnet_basicsr  # noqa: F401
    torch.manual_seed(0)
    torch.save({'params': build_network({'type': 'SRCNN', 'num_feat': [8, 4]}).state_dict()}, folder / 'srcnn.pth')
    layer = build_network({'type': 'MCNetArch',
                           'backbone': {'net': {'type': 'SRCNN', 'num_feat': [8, 4]}, 'path': str(folder / 'srcnn.pth'),
                                        'input': 'upsampled', 'channels': 1},
                           'operator': {'type': 'bicubic', 'scale': 2}, 'beta': 0.05,
                           'denoiser': {'depth': 3, 'num_feat': 8, 'sn_grid': 8}})
    torch.save(layer.state_dict(), folder / 'layer.pth')
    lr = torch.rand(4, 3, 10, 10, dtype=torch.float64)
    gt = torch.nn.functional.interpolate(lr, scale_factor=2, mode='bilinear') + 0.05 * torch.rand(4, 3, 20, 20,
                                                                                                  dtype=torch.float64)
    torch.save((lr, gt), folder / 'batch.pt')
    return lr, gt


def _ddp_worker(rank, folder):
    from torch.nn.parallel import DistributedDataParallel

    from mcnet_basicsr.models.protocol_sr_model import ReportingRun
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{folder / "rendezvous"}', rank=rank, world_size=WORLD)
    try:
        net = _tiny_layer(folder)
        if rank == 1:  # a rank whose power-iteration state drifted: DDP must replace it by rank 0's
            for m in net.denoiser.sn_convs():
                m.sn_v.normal_()
        ddp = DistributedDataParallel(ReportingRun(net))  # as MCNetModel wraps it: DDP's forward is the layer's run
        lr, gt = torch.load(folder / 'batch.pt')
        part = slice(rank * len(lr) // WORLD, (rank + 1) * len(lr) // WORLD)
        out, info = ddp(lr[part])
        loss = (out - gt[part]).square().mean()
        loss.backward()
        torch.save({'grads': {n: p.grad for n, p in net.named_parameters()},
                    'sn_v': [m.sn_v.clone() for m in net.denoiser.sn_convs()],
                    'backward_calls': info['backward'].calls}, folder / f'rank{rank}.pt')
    finally:
        dist.destroy_process_group()


@needs_gloo
def test_ddp_gradient_equals_single_process_gradient(tmp_path):
    """2 gloo processes, half the batch each, DDP-averaged gradient == the gradient of one process on
    the whole batch: the implicit backward (vjp solve inside autograd) lets DDP's reducer fire once per
    parameter, and the spectral-norm state is rank 0's on every rank."""
    lr, gt = _save_tiny_problem(tmp_path)

    mp.spawn(_ddp_worker, args=(tmp_path, ), nprocs=WORLD, join=True)

    ref = _tiny_layer(tmp_path)
    out, info = ref.run(lr)
    (out - gt).square().mean().backward()
    assert info['backward'].calls == 1
    results = [torch.load(tmp_path / f'rank{r}.pt') for r in range(WORLD)]
    for res in results:
        assert res['backward_calls'] == 1
        for name, p in ref.named_parameters():
            g = res['grads'][name]
            assert g is not None, name
            rel = float((g - p.grad).norm() / p.grad.norm())
            assert rel < 1e-5, f'{name}: DDP gradient differs from the one-process gradient by {rel:.2e} (relative)'
        for v0, v in zip(results[0]['sn_v'], res['sn_v']):
            torch.testing.assert_close(v, v0, rtol=0, atol=0)
    for v0, v_ref in zip(results[0]['sn_v'], [m.sn_v for m in ref.denoiser.sn_convs()]):
        torch.testing.assert_close(v0, v_ref, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- torchrun end to end
def _launcher(ws):
    """mcnet_basicsr/train.py's main() with experiments/ in the workspace instead of the repository; each process
    then prints whether it is still in a process group (main() must leave it: see ``EXIT_LINE``)."""
    path = ws / 'train_in_ws.py'
    path.write_text(f'import sys\nsys.path.insert(0, {str(REPO_ROOT)!r})\n'
                    f'from mcnet_basicsr.train import main\nmain(root_path={str(ws)!r})\n'
                    'import torch.distributed as dist\n'
                    'print("process group still initialised after main():", dist.is_initialized(), flush=True)\n')
    return str(path)


# A rank that leaves its gloo group to interpreter shutdown can abort after a successful run (SIGABRT,
# "terminate called without an active exception"; seen once in CI): main() destroys the group itself.
EXIT_LINE = 'process group still initialised after main(): False'


# The launcher tests run the CPU path (gloo) on every host: with a GPU visible, two processes would ask nccl for
# one GPU each, which a one-GPU machine refuses (pipeline.check_processes_per_gpu).
CPU_ONLY = {'CUDA_VISIBLE_DEVICES': ''}


def _torchrun(ws, opt_path, *extra):
    env = repo_env(OMP_NUM_THREADS='1', **CPU_ONLY)
    return subprocess.Popen([*TORCHRUN, '--standalone', f'--nproc_per_node={WORLD}', _launcher(ws), '-opt', opt_path,
                             '--launcher', 'pytorch', *extra], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish(proc, timeout=240):
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        out, _ = proc.communicate()
        raise AssertionError(f'torchrun did not finish in {timeout} s:\n{out[-5000:]}')
    assert proc.returncode == 0, f'torchrun failed ({proc.returncode}):\n{out[-6000:]}'
    return out


def _children(pid):
    kids = []
    for task in Path(f'/proc/{pid}/task').glob('*'):
        try:
            kids += [int(k) for k in (task / 'children').read_text().split()]
        except OSError:
            pass
    return kids


def _stop(proc):
    """SIGTERM torchrun (as a scheduler pre-empting the job does); torchrun stops its workers, which run
    in sessions of their own; any worker still alive after that is killed by its pid."""
    workers = _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _ddp_option(ws, total_iter, name):
    opt = tiny_train_option(ws, total_iter, name=name)
    opt['datasets']['train']['batch_size_per_gpu'] = 1  # total batch 2 over 2 ranks
    return opt


def test_more_torchrun_processes_than_gpus_are_refused_before_nccl(monkeypatch):
    from basicsr.utils import dist_util

    from mcnet_basicsr.utils import pipeline

    def basicsr_init_dist(*args, **kwargs):
        raise AssertionError('reached nccl')

    monkeypatch.setattr(torch.cuda, 'is_available', lambda: True)
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    monkeypatch.setattr(dist_util, 'init_dist', basicsr_init_dist)
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '2')
    with pytest.raises(ValueError, match=r'started 2 processes on this machine, which has 1 GPU\(s\).*'
                                         r'--nproc_per_node=1.*CUDA_VISIBLE_DEVICES='):
        pipeline.init_dist('pytorch')
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '1')  # one process per GPU goes on to BasicSR's set-up
    with pytest.raises(AssertionError, match='reached nccl'):
        pipeline.init_dist('pytorch')
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '2')  # slurm binds its tasks itself
    with pytest.raises(AssertionError, match='reached nccl'):
        pipeline.init_dist('slurm')


@needs_torchrun
@needs_gloo
def test_torchrun_trains_checkpoints_and_validates(workspace):  # noqa: F811
    ws = workspace
    opt_path = dump_option(_ddp_option(ws, total_iter=4, name='ddp_e2e'), ws / 'ddp_e2e.yml')
    out = _finish(_torchrun(ws, opt_path))
    assert out.count(EXIT_LINE) == WORLD, 'every rank leaves its process group before exit'
    exp = ws / 'experiments' / 'ddp_e2e'
    for f in ('models/net_g_2.pth', 'models/net_g_4.pth', 'models/net_g_latest.pth', 'training_states/4.state'):
        assert (exp / f).is_file(), f
    assert len(list(exp.glob('train_*.log'))) == 1, 'only rank 0 writes a log'
    log = newest_log(exp, 'train')
    assert 'World size (gpu number): 2' in log
    # DDP wraps the layer's run (ReportingRun); the network printed is the layer
    assert 'DistributedDataParallel - ReportingRun' in log and 'INFO: MCNetArch(' in log
    assert log.count('Saving models and training states.') == 2
    assert log.count('fidelity_float') == 3, 'validation at iterations 2 and 4 and at the end, on rank 0 only'
    assert log.count('# psnr:') == 3 and 'beta:' in log and 'bwd_iter:' in log
    params = torch.load(exp / 'models' / 'net_g_4.pth', map_location='cpu')['params']
    assert 'log_beta' in params and not any(k.startswith('module.') or 'backbone' in k for k in params)


@needs_torchrun
@needs_gloo
def test_torchrun_auto_resume_after_kill(workspace):  # noqa: F811
    ws = workspace
    name = 'ddp_resume'
    opt = _ddp_option(ws, total_iter=200, name=name)
    opt['val']['val_freq'] = 10**6
    opt['logger'].update(save_checkpoint_freq=1)
    opt_path = dump_option(opt, ws / f'{name}.yml')
    states = ws / 'experiments' / name / 'training_states'
    proc = _torchrun(ws, opt_path)
    try:
        deadline = time.time() + 180
        while len(list(states.glob('*.state'))) < 3:
            assert proc.poll() is None, f'training ended early:\n{proc.communicate()[0][-5000:]}'
            assert time.time() < deadline, 'no training state after 180 s'
            time.sleep(0.5)
    finally:
        _stop(proc)
        proc.communicate()
    assert proc.returncode != 0

    iters = sorted((int(p.stem) for p in states.glob('*.state')), reverse=True)
    resumed = None
    for it in iters:  # the newest readable state (the kill may have cut the newest one short)
        try:
            torch.load(states / f'{it}.state', weights_only=False)
        except Exception:  # noqa: BLE001
            continue
        resumed = it
        break
    assert resumed is not None and resumed >= 2
    total = iters[0] + 2
    opt['train']['total_iter'] = total
    dump_option(opt, opt_path)
    _finish(_torchrun(ws, opt_path, '--auto_resume'))
    log = newest_log(ws / 'experiments' / name, 'train')
    assert f"iter: {resumed}." in log and 'Resuming training from epoch' in log, log[-3000:]
    assert 'Start training from epoch' in log and f'iter: {resumed}\n' in log
    assert f'iter:{total:8,d}' in log, 'training did not reach total_iter'
    assert (states / f'{total}.state').is_file() and 'End of training' in log


@needs_gloo
def test_slurm_launcher_emulated_srun(workspace, tmp_path):  # noqa: F811
    """`srun --ntasks=2 python mcnet_basicsr/train.py -opt ... --launcher slurm`, emulated: two processes with the
    environment srun gives its tasks and an `scontrol` on PATH. Ranks, world size and the master address come from
    BasicSR's slurm set-up (`dist_params` of the option file as shipped: nccl, which becomes gloo without CUDA)."""
    import socket
    ws = workspace
    opt = _ddp_option(ws, total_iter=2, name='slurm_e2e')
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    opt['dist_params'] = {'backend': 'nccl', 'port': port}
    opt_path = dump_option(opt, ws / 'slurm_e2e.yml')
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    calls = tmp_path / 'scontrol_calls.txt'
    scontrol = bin_dir / 'scontrol'
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho 127.0.0.1\n')
    scontrol.chmod(0o755)
    procs = []
    for rank in range(WORLD):
        env = repo_env(OMP_NUM_THREADS='1', PATH=f'{bin_dir}:{os.environ["PATH"]}', SLURM_PROCID=str(rank),
                       SLURM_NTASKS=str(WORLD), SLURM_NODELIST='node[01]', SLURM_LOCALID=str(rank), **CPU_ONLY)
        env.pop('MASTER_PORT', None)
        env.pop('MASTER_ADDR', None)
        procs.append(subprocess.Popen([sys.executable, _launcher(ws), '-opt', opt_path, '--launcher', 'slurm'],
                                      cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    for proc in procs:
        assert EXIT_LINE in _finish(proc)
    assert calls.read_text().split('\n')[:WORLD] == ['show hostname node[01]'] * WORLD
    exp = ws / 'experiments' / 'slurm_e2e'
    assert (exp / 'models' / 'net_g_2.pth').is_file() and (exp / 'training_states' / '2.state').is_file()
    assert len(list(exp.glob('train_*.log'))) == 1, 'only rank 0 writes a log'
    log = newest_log(exp, 'train')
    assert 'World size (gpu number): 2' in log and 'DistributedDataParallel - ReportingRun' in log
    assert 'INFO: MCNetArch(' in log
    assert '# psnr:' in log
