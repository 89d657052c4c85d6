"""Settings that shrink a recipe to test size: every family's first preset by its own
Family.tiny, and one small encoder."""

from keras_ctx import families

ENCODER = ["num_layers=1", "num_heads=2", "hidden_size=32", "intermediate_size=64"]


# Every family with a recipe that runs on a --corpus alone, its first preset shrunk by its own
# `Family.tiny` (a recipe that `needs` more inputs, CoVe's --parallel and --glove, is tested
# with them in its own file: tests/commands/test_pretrain_cove.py).
FAMILIES = {next(iter(family.presets)): [f"{key}={value}" for key, value in family.tiny.items()]
            for family in map(families.get, families.names())
            if family.dataset is not None and not getattr(family.dataset, "needs", "")}
