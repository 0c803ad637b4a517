"""The ``mcnet-sr`` command: its options (:mod:`.options`, standard library and PyYAML only, so ``--help`` answers
at once), its entry point (:mod:`.main`) and its work (:mod:`.inference`)."""
