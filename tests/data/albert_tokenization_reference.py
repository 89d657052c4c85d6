"""ALBERT's released text path, transcribed for tests/data/test_albert_normalisation.py.

google-research/albert tokenization.py @b772393, `preprocess_text` and
`encode_pieces` (Python 3 branches; `six.ensure_binary(x).replace(...)` on bytes
becomes the same replace on str), as create_pretraining_data.py applies them to a
line when `--spm_model_file` is set.
"""

import unicodedata

SPIECE_UNDERLINE = "▁"


def preprocess_text(inputs, remove_space=True, lower=False):
    outputs = inputs
    if remove_space:
        outputs = " ".join(inputs.strip().split())
    outputs = unicodedata.normalize("NFKD", outputs)
    outputs = "".join([c for c in outputs if not unicodedata.combining(c)])
    if lower:
        outputs = outputs.lower()
    return outputs


def encode_pieces(sp_model, text):
    pieces = sp_model.EncodeAsPieces(text)
    new_pieces = []
    for piece in pieces:
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            cur_pieces = sp_model.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
            if piece[0] != SPIECE_UNDERLINE and cur_pieces[0][0] == SPIECE_UNDERLINE:
                if len(cur_pieces[0]) == 1:
                    cur_pieces = cur_pieces[1:]
                else:
                    cur_pieces[0] = cur_pieces[0][1:]
            cur_pieces.append(piece[-1])
            new_pieces.extend(cur_pieces)
        else:
            new_pieces.append(piece)
    return new_pieces


def encode_ids(sp_model, text, lower=True):
    """create_pretraining_data.py's line -> ids: preprocess_text, then encode_pieces."""
    return [sp_model.PieceToId(p) for p in encode_pieces(sp_model, preprocess_text(text, lower=lower))]
