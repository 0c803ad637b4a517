"""What this project ships and fetches: the pretrained models (:mod:`.pretrained`), the third-party data sets and
weights with their checksums (:mod:`.assets`, ``assets.yml``) and the converters of third-party weights into BasicSR
checkpoints (:mod:`.convert`). Importing the subpackage imports none of them."""
