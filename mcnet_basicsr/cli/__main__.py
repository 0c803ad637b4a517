"""``python -m mcnet_basicsr.cli``: the ``mcnet-sr`` command."""
from .main import console_main

console_main()
