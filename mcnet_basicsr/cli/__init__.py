"""The ``mcnet-sr`` command: its work (:mod:`.inference`); the argument parser is the top-level ``mcnet_sr_cli``
module, which answers ``--help`` without importing this package."""
