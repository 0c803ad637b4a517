"""Helpers for wrapping BasicSR's train/test pipelines."""
import functools
import os
import os.path as osp
import warnings

import torch


def default_root_path():
    """Where experiments/, results/ and tb_logger/ go: the current folder, where the option files' data paths
    (``datasets/...``) are read from too.

    BasicSR's own scripts take the folder above their ``basicsr/``: a checkout's root, from which they are run, but
    site-packages for a pip-installed basicsr. Ours never write into the package's folder, wherever it is installed.
    """
    return os.getcwd()


def load_resume_state(opt):
    """Device-agnostic replacement for ``basicsr.train.load_resume_state``.

    BasicSR 1.4.2 maps the state onto ``torch.cuda.current_device()`` (fails without CUDA) and
    looks for ``experiments/<name>/training_states`` relative to the current directory instead
    of the root path it writes to. Same selection rule otherwise: the newest ``<iter>.state``
    with ``--auto_resume``, else ``path.resume_state``; with ``--auto_resume`` a state that cannot be
    read (a job killed while rank 0 was writing it) is skipped for the one before it, whose network
    checkpoint is complete (BasicSR writes ``net_g_<iter>.pth`` before ``<iter>.state``).
    """
    from basicsr.utils import check_resume, scandir

    device = torch.device('cuda', torch.cuda.current_device()) if torch.cuda.is_available() else torch.device('cpu')

    def load(path):  # our own training states hold optimizer/scheduler state (Counters etc.), not only tensors
        return torch.load(path, map_location=device, weights_only=False)

    resume_state = None
    if opt['auto_resume']:
        state_path = osp.join(opt.get('root_path', '.'), 'experiments', opt['name'], 'training_states')
        if osp.isdir(state_path):
            iters = sorted((float(v.split('.state')[0])
                            for v in scandir(state_path, suffix='state', recursive=False, full_path=False)),
                           reverse=True)
            for it in iters:
                path = osp.join(state_path, f'{it:.0f}.state')
                try:
                    resume_state = load(path)
                except Exception as err:  # noqa: BLE001  (a job killed while saving leaves a truncated file)
                    warnings.warn(f'--auto_resume: cannot read {path} ({type(err).__name__}: {err}); '
                                  'trying the previous training state.')
                    continue
                opt['path']['resume_state'] = path
                break
    elif opt['path'].get('resume_state'):
        resume_state = load(opt['path']['resume_state'])

    if resume_state is None:
        return None
    check_resume(opt, resume_state['iter'])
    return resume_state


def check_processes_per_gpu(launcher):
    """Refuse more torchrun processes on this machine than it has GPUs, before nccl is asked.

    BasicSR binds rank r to GPU ``r % #GPUs``, so two processes would share a GPU and nccl stops them with
    "Duplicate GPU detected" after the whole set-up. ``torchrun`` says how many processes it started here
    (``LOCAL_WORLD_SIZE``); slurm binds tasks itself.
    """
    if launcher != 'pytorch':
        return
    local = int(os.environ.get('LOCAL_WORLD_SIZE', 1))
    gpus = torch.cuda.device_count()
    if local > gpus:
        raise ValueError(f'torchrun started {local} processes on this machine, which has {gpus} GPU(s): nccl needs '
                         f'one GPU per process. Use --nproc_per_node={gpus}, or hide the GPUs '
                         '(CUDA_VISIBLE_DEVICES=) to train on the CPU, where the processes join a gloo group.')


def init_dist(launcher, backend='nccl', **kwargs):
    """``basicsr.utils.dist_util.init_dist`` that also runs without CUDA (for tests and CPU machines).

    With CUDA: BasicSR's own code path (``torch.cuda.set_device(rank % #GPUs)``, then
    ``init_process_group``; nccl unless ``dist_params.backend`` says otherwise for ``slurm``).
    Without CUDA the processes join a gloo process group instead: BasicSR would call
    ``torch.cuda.set_device`` and ask for nccl, both of which fail on a CPU-only machine.
    ``--launcher pytorch`` (torchrun) then reads torchrun's environment; ``--launcher slurm`` still goes
    through BasicSR's slurm set-up (``SLURM_PROCID``/``SLURM_NTASKS``/``SLURM_NODELIST``, the master
    address from ``scontrol``, ``dist_params.port``), with only its GPU binding left out.
    """
    from basicsr.utils import dist_util
    if torch.cuda.is_available():
        check_processes_per_gpu(launcher)
        return dist_util.init_dist(launcher, backend, **kwargs)
    if launcher == 'slurm':
        # BasicSR binds task i to GPU i % device_count(): with no GPU that divides by zero, and there is nothing
        # to bind. Everything else (ranks, world size, master address and port) is its code.
        saved = torch.cuda.device_count, torch.cuda.set_device
        torch.cuda.device_count, torch.cuda.set_device = (lambda: 1), (lambda device: None)
        try:
            return dist_util._init_dist_slurm('gloo', **kwargs)
        finally:
            torch.cuda.device_count, torch.cuda.set_device = saved
    if launcher != 'pytorch':
        raise ValueError(f'unknown launcher {launcher!r} (BasicSR knows none, pytorch and slurm).')
    import torch.distributed as dist
    dist.init_process_group(backend='gloo', **kwargs)


def patch_basicsr_for_cpu(train_module=None):
    """Every patch BasicSR 1.4.2 needs to run without CUDA, in one place; only our entry points (train.py, test.py)
    call it, so importing the package changes nothing in BasicSR."""
    from basicsr.utils import options
    options.init_dist = init_dist  # BasicSR's calls torch.cuda.set_device and asks for nccl, both fail on a CPU
    if train_module is not None:  # BasicSR's maps the state onto the current CUDA device and reads it from the cwd
        train_module.load_resume_state = load_resume_state


def check_inputs_when_parsing(check):
    """Make BasicSR's ``parse_options`` call ``check(opt, option_file)`` on the option file it has just read.

    The start-up hook (:mod:`mcnet_basicsr_hook`) calls this once basicsr is imported, with
    :func:`mcnet_basicsr.zoo.assets.exit_if_inputs_missing` (one line per missing input: the path, its key, what it is
    relative to, the command that makes it; exit status 2), so that BasicSR's own ``basicsr/train.py`` / ``test.py``,
    run with our option files, report missing data and weights as our entry points do instead of a traceback from
    inside a data loader. The check sees the options as
    BasicSR parsed them (``--force_yml`` applied). Scripts bind ``parse_options`` when they import it: BasicSR's
    scripts import it after the hook has run.
    """
    from basicsr.utils import options
    if getattr(options.parse_options, 'checks_inputs', False):
        return
    parse = options.parse_options

    @functools.wraps(parse)
    def parse_options(root_path, is_train=True):
        opt, args = parse(root_path, is_train)
        check(opt, args.opt)
        return opt, args

    parse_options.checks_inputs = True
    options.parse_options = parse_options


def destroy_dist():
    """Leave the process group, if this process joined one, before the interpreter shuts down.

    BasicSR's pipelines never call ``destroy_process_group``. A rank that finishes first (every rank but
    0 skips the final save and validation) then tears the group down during interpreter finalisation,
    where gloo's worker threads can still hold work objects: that rank dies with SIGABRT ("terminate
    called without an active exception") after a run that succeeded, and torchrun reports the job as
    failed. Called after a pipeline returns; not on an exception, where the other ranks may still wait in
    a collective and an orderly teardown could hang.
    """
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
