"""`keras-ctx pretrain` without its closing sense table, for tests that pretrain for the run
they get (not a test module). The table's forward passes run eagerly: on JAX (op by op)
they were a third of a tiny run's time. What the table says is tested in
tests/commands/test_sense_table.py, and a subprocess run prints it in
tests/cli/test_cli.py::test_killed_pretraining_resumes_to_the_same_model.
"""

import contextlib

import pytest


@contextlib.contextmanager
def sense_table_off():
    """Inside it, pretrain calls no sense table; yields the run directories it was asked
    for (pretrain still asks)."""
    from keras_ctx.commands import pretrain

    asked = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pretrain, "show_sense_table",
                      lambda run_dir, model=None: asked.append(str(run_dir)))
        yield asked

