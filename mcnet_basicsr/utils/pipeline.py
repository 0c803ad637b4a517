"""Helpers for wrapping BasicSR's train/test pipelines."""
import os
import os.path as osp

import torch

_REPO_ROOT = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir, osp.pardir))


def default_root_path():
    """Where experiments/, results/ and tb_logger/ go.

    The repository root for a source checkout (as BasicSR's own scripts do for theirs), else the
    current directory, so an installed package never writes into site-packages.
    """
    if osp.isfile(osp.join(_REPO_ROOT, 'setup.py')) and osp.isdir(osp.join(_REPO_ROOT, 'options')):
        return _REPO_ROOT
    return os.getcwd()


def load_resume_state(opt):
    """Device-agnostic replacement for ``basicsr.train.load_resume_state``.

    BasicSR 1.4.2 maps the state onto ``torch.cuda.current_device()`` (fails without CUDA) and
    looks for ``experiments/<name>/training_states`` relative to the current directory instead
    of the root path it writes to. Same selection rule otherwise: the newest ``<iter>.state``
    with ``--auto_resume``, else ``path.resume_state``.
    """
    from basicsr.utils import scandir
    from basicsr.utils import check_resume

    resume_state_path = None
    if opt['auto_resume']:
        state_path = osp.join(opt.get('root_path', '.'), 'experiments', opt['name'], 'training_states')
        if osp.isdir(state_path):
            states = [v for v in scandir(state_path, suffix='state', recursive=False, full_path=False)]
            if states:
                latest = max(float(v.split('.state')[0]) for v in states)
                resume_state_path = osp.join(state_path, f'{latest:.0f}.state')
                opt['path']['resume_state'] = resume_state_path
    elif opt['path'].get('resume_state'):
        resume_state_path = opt['path']['resume_state']

    if resume_state_path is None:
        return None
    device = torch.device('cuda', torch.cuda.current_device()) if torch.cuda.is_available() else torch.device('cpu')
    # our own training states hold optimizer/scheduler state (Counters etc.), not only tensors
    resume_state = torch.load(resume_state_path, map_location=device, weights_only=False)
    check_resume(opt, resume_state['iter'])
    return resume_state


def patch_resume_for_cpu(train_module):
    """Make ``train_module.train_pipeline`` use :func:`load_resume_state` (our entry point only)."""
    train_module.load_resume_state = load_resume_state
