"""`keras-ctx finetune`'s labelled TSV (keras_ctx.data.labelled) is read strictly (issue 22)."""

import pytest

from tests.cli_helpers import one_line_error, run_cli


@pytest.mark.parametrize("text, header, message", [
    ("text\tlabel\ngood film\tpos\nbad film\tneg\n", None, None),
    ("sentence\tsentiment\ngood film\tpos\nbad film\tneg\n", None, None),
    ("review\tstars\ngood film\tpos\nbad film\tneg\nfine film\tpos\n", None,
     ":1: the label 'stars' occurs on no other line"),
    ("review\tstars\ngood film\tpos\nbad film\tneg\nfine film\tpos\n", True, None),
    ("pos\tgood film\nneg\tbad film\npos\tfine film\nneg\tawful film\n", None,
     "columns swapped"),
    ("good film\tpos\tx\nbad film\tneg\n", None, ":1: expected exactly 2"),
    ("good film\tpos\nbad film\tpos\n", None, "at least two classes"),
    ("good film\tpos\nbad film\t \n", None, ":2: the label is empty"),
])
def test_labelled_tsv_is_read_strictly(tmp_path, text, header, message):
    from keras_ctx.data.labelled import read_labelled_tsv

    path = tmp_path / "train.tsv"
    path.write_text(text)
    if message is None:
        texts, labels = read_labelled_tsv(str(path), header=header)
        assert texts[0] == "good film" and set(labels) == {"pos", "neg"}
    else:
        with pytest.raises(ValueError) as error:
            read_labelled_tsv(str(path), header=header)
        assert message in str(error.value) and str(path) in str(error.value)


def test_labels_are_stripped(tmp_path):
    from keras_ctx.data.labelled import read_labelled_tsv

    path = tmp_path / "train.tsv"
    path.write_text("good film\tpos \r\nbad film\t neg\r\nok film\tpos\r\n")
    assert read_labelled_tsv(str(path), header=False)[1] == ["pos", "neg", "pos"]


def test_finetune_on_three_columns_fails_naming_the_line(tiny_run, tmp_path, capsys):
    train = tmp_path / "train.tsv"
    train.write_text("the film was good\tpos\textra\nthe film was bad\tneg\n")
    code, output = run_cli(capsys, "finetune", str(tiny_run), "--train", str(train),
                           "--out", str(tmp_path / "clf"), "--epochs", "1")
    assert code == 2 and f"{train}:1: expected exactly 2" in one_line_error(output)
