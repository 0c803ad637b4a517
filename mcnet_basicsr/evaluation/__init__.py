"""The tables: BasicSR test option files evaluated under the project's protocol (:mod:`.evaluate`), the paper's
tables as this project reproduces them (:mod:`.tables`) and perturbed LR inputs for robustness studies
(:mod:`.perturbations`). Importing the subpackage imports none of them."""
