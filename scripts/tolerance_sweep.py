"""Every solver tolerance's iterations and PSNR against the tables' result, for the model ``mcnet-sr`` runs
(:mod:`mcnet_basicsr.tolerance_sweep`), e.g. ``python scripts/tolerance_sweep.py --scale 2``."""
from mcnet_basicsr.tolerance_sweep import main

if __name__ == '__main__':
    main()
