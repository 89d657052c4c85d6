"""`keras-ctx cvt`: cross-view training of a tagger on files (Clark et al. 2018)."""

import keras

from keras_ctx.runs import check_new_directory
from keras_ctx.tasks.cvt_tagger import save_cvt_tagger, train_cvt_tagger


def cvt_from_files(train, unlabelled, out, steps=1000, batch_size=64, vocabulary_size=20000,
        learning_rate=0.5, seed=0, overrides=None, warm_up_steps=5000):
    """`keras-ctx cvt`: a CVT tagger from a tagged TSV and unlabelled sentences, into `out`."""
    from keras_ctx.common import validation

    from keras_ctx.models.cvt import CvtEncoder

    validation.check_args(steps=steps, batch_size=batch_size, vocabulary_size=vocabulary_size,
                          learning_rate=learning_rate, seed=seed, warm_up_steps=warm_up_steps)
    validation.check_given(train=train, unlabelled=unlabelled, out=out)
    validation.check_set("cvt's CvtEncoder", CvtEncoder, dict(overrides or {}))
    check_new_directory(out)
    keras.utils.set_random_seed(seed)
    trainer, vocabulary, tags = train_cvt_tagger(
        train, unlabelled, steps=steps, batch_size=batch_size,
        vocabulary_size=vocabulary_size, learning_rate=learning_rate,
        encoder_config=dict(overrides or {}), seed=seed, warm_up_steps=warm_up_steps,
        verbose=2)
    save_cvt_tagger(trainer, vocabulary, tags, out)
    print(f"Saved the CVT tagger ({len(tags)} tags) to {out}.")
    return trainer
