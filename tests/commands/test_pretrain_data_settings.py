"""`keras-ctx pretrain --set` reaches a size's published data settings (issue 54)."""

import pytest

from keras_ctx import registry
from keras_ctx.commands import pretrain_checks
from keras_ctx.common.errors import ConfigError
from keras_ctx.families.common import published
from keras_ctx.models import presets


def checked(preset, tmp_path, **overrides):
    return pretrain_checks.PretrainRequest.checked(preset, str(tmp_path / "run"),
                                                   overrides=overrides)


def test_bart_takes_the_papers_infilling_instead_of_its_authors_run(tmp_path):
    request = checked("bart-base", tmp_path, mean_span=3, random_token_rate=0, num_layers=1)
    assert request.overrides == {"num_layers": 1}  # the backbone's share
    assert request.data_settings == {"mean_span": 3.0, "random_token_rate": 0.0}
    options = registry.get("bart").dataset.sized(published(request.run))
    # The authors' run (fairseq #1899) is lambda 3.5 with 10% random tokens; the paper's 3, 0.
    default = registry.get("bart").dataset.sized(presets.pretraining("bart-base"))
    assert (default["poisson_lambda"], default["mask_random"]) == (3.5, 0.1)
    assert (options["poisson_lambda"], options["mask_random"]) == (3.0, 0.0)
    assert options["rate"] == default["rate"] == 0.3
    # A resumed run compares what it was started with: the data settings are part of it.
    assert request.settings()["overrides"] == {"num_layers": 1, "mean_span": 3.0,
                                               "random_token_rate": 0.0}


def test_t5_noise_density_follows_the_request(tmp_path):
    request = checked("t5-small", tmp_path, mask_rate=0.3)
    options = registry.get("t5").dataset.sized(published(request.run))
    assert options == {"noise_density": 0.3, "mean_noise_span_length": 3.0}


@pytest.mark.parametrize("preset, overrides, words", [
    ("bert-tiny", {"mask_rate": 0.2}, "the bert recipe does not read `mask_rate`"),
    ("electra-small", {"mean_span": 3.0}, "(it reads mask_rate)"),
    ("bart-base", {"mask_rate": 1.5}, "`mask_rate` must be a number in (0, 1)"),
    ("bart-base", {"mean_span": True}, "`mean_span`"),
])
def test_a_data_setting_the_recipe_cannot_take_is_refused(tmp_path, preset, overrides, words):
    with pytest.raises(ConfigError) as caught:
        checked(preset, tmp_path, **overrides)
    assert words in str(caught.value)
    assert not (tmp_path / "run").exists()  # refused before anything is written
