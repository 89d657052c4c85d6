"""ERNIE 1.0 (Sun et al. 2019): BERT's network and NSP, knowledge masking in stages.

`keras-ctx pretrain` has no chunker / NER: its phrases are the corpus'
collocations, or `--phrases FILE` (a phrase lexicon, as a chunker's output);
its entity stage runs with `--entities FILE` (an entity lexicon), and without
one the run says it is not run. Each lexicon is one name a line, tokenized
with the run's tokenizer and masked whole where it occurs.
"""

from keras_ctx.models.ernie import convert as convert_ernie
from keras_ctx.data import knowledge_masking, pipelines, tokenizers
from keras_ctx.families.common import TINY_TRANSFORMER
from keras_ctx.families.common import POOLED, WORDPIECE_FRAMING, pretrainer
from keras_ctx.models.ernie import backbone as ernie
from keras_ctx.models.bert import backbone as bert
from keras_ctx.models.presets import Pretraining, Stage, register_pretraining
from keras_ctx.pretraining import BertPretrainer
from keras_ctx.registry import Family, register_family

# Sun et al. 2019, Sec. 3.2 orders the stages (basic, phrase, entity masking) and gives
# no step at which each starts: keras_ctx's boundaries are its own
# (pipelines.ERNIE_STAGE_STEPS); 15% of the tokens masked as BERT (Sec. 3.2.1).
ERNIE_STAGES = (
    Stage("basic-level masking (words)", 0, source="Sun et al. 2019, Sec. 3.2.1"),
    Stage("phrase-level masking (the corpus' collocations, or --phrases FILE)",
          pipelines.ERNIE_STAGE_STEPS,
          source="order: Sun et al. 2019, Sec. 3.2.2; step: keras_ctx's own "
                 "(pipelines.ERNIE_STAGE_STEPS)"),
    Stage("entity-level masking", 2 * pipelines.ERNIE_STAGE_STEPS,
          source="order: Sun et al. 2019, Sec. 3.2.3; step: keras_ctx's own",
          runs="--entities FILE (one entity name a line)", needs="entities"),
)
ERNIE_PRETRAINING = register_pretraining({
    "ernie-1.0-base": Pretraining(mask_rate=0.15, stages=ERNIE_STAGES,
                                  source="Sun et al. 2019, Sec. 3.2")})

# The lexicon files `keras-ctx pretrain` takes for this recipe (--phrases, --entities): the
# run's `Run.inputs` carry their paths, fingerprinted and recorded as the run's inputs.
LEXICONS = ("phrases", "entities")


def ernie_recipe(documents, tokenizer, run):
    """ERNIE's knowledge masking over the run's corpus: phrases from --phrases FILE, else the
    corpus' collocations; entities from --entities FILE, else no entity stage."""
    inputs = dict(run.inputs)
    lexicons = {name: knowledge_masking.read_lexicon(inputs[name], "--" + name)
                for name in LEXICONS if inputs.get(name)}
    return pipelines.ernie_dataset(
        documents, tokenizer, batch_size=run.batch_size, sequence_length=run.sequence_length,
        seed=run.seed, phrases=lexicons.get("phrases", "collocations"),
        entities=lexicons.get("entities"))


ernie_recipe.builder, ernie_recipe.options = pipelines.ernie_dataset, {"phrases": "collocations"}
ernie_recipe.lexicons = LEXICONS  # `keras-ctx pretrain --phrases / --entities` reach it

ERNIE = register_family(Family(
    "ernie", bert.BertBackbone, ernie.ERNIE_PRESETS, tokenizers.train_wordpiece,
    WORDPIECE_FRAMING, pooling=POOLED,
    dataset=ernie_recipe,
    pretrainer=pretrainer(BertPretrainer),
    huggingface=convert_ernie.HUGGINGFACE,
    borrows_backbone=True, tiny=TINY_TRANSFORMER,
    objective=(BertPretrainer, ("next_sentence_labels",))))
