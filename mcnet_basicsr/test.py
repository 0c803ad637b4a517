"""Test with BasicSR's pipeline and mcnet_basicsr's types registered.

    python mcnet_basicsr/test.py -opt options/test_mcnet_srcnn_x2.yml
    python -m mcnet_basicsr.test -opt ...

results/ lands in the current folder, from which the option file's data paths (``datasets/...``) are read too:
BasicSR's ``test_pipeline`` with its root there. (BasicSR's own ``basicsr/test.py`` takes the folder above its
``basicsr/``, which for a pip-installed basicsr is site-packages.)
"""
import os.path as osp
import sys

if __package__ in (None, ''):  # run as a script: import the package, not its folder's modules
    sys.path[0] = osp.abspath(osp.join(osp.dirname(__file__), osp.pardir))

import mcnet_basicsr  # noqa: E402,F401  (registers our types, aliases torchvision)
from mcnet_basicsr.utils.pipeline import default_root_path, destroy_dist, patch_basicsr_for_cpu  # noqa: E402
from mcnet_basicsr.zoo.assets import check_option_file_inputs  # noqa: E402


def main(root_path=None):
    mcnet_basicsr.register()  # our types into BasicSR's registries (a no-op where importing the package did it)
    check_option_file_inputs(sys.argv[1:])
    from basicsr.test import test_pipeline
    patch_basicsr_for_cpu()
    test_pipeline(root_path or default_root_path())
    destroy_dist()


if __name__ == '__main__':
    main()
