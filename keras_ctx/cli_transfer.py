"""`keras-ctx ulmfit`, `keras-ctx cvt` and `keras-ctx cvt-tag`: argparse only (the work is
in recipes_ulmfit_cvt)."""


def _ulmfit(args):
    from keras_ctx.recipes import parse_overrides
    from keras_ctx.recipes_ulmfit_cvt import ulmfit_from_files

    ulmfit_from_files(args.train, args.text, args.out, general_text=args.general_text,
                      lm_epochs=args.lm_epochs, epochs=args.epochs, batch_size=args.batch_size,
                      sequence_length=args.sequence_length, vocabulary_size=args.vocabulary_size,
                      seed=args.seed, overrides=parse_overrides(args.set))
    return 0


def _cvt(args):
    from keras_ctx.recipes import parse_overrides
    from keras_ctx.recipes_ulmfit_cvt import cvt_from_files

    cvt_from_files(args.train, args.unlabelled, args.out, steps=args.steps,
                   batch_size=args.batch_size, vocabulary_size=args.vocabulary_size,
                   learning_rate=args.learning_rate, seed=args.seed,
                   overrides=parse_overrides(args.set), warm_up_steps=args.warm_up_steps)
    return 0


def _cvt_tag(args):
    from keras_ctx.recipes_ulmfit_cvt import tag_file

    for line in tag_file(args.run_dir, args.input, batch_size=args.batch_size):
        print(line)
    return 0


def add_commands(commands):
    """Adds the two subcommands to `keras-ctx`'s subparsers."""
    ulmfit = commands.add_parser(
        "ulmfit", help="ULMFiT: fine-tune an AWD-LSTM LM on target text, then a classifier "
                       "on a TSV of text<TAB>label (Howard & Ruder 2018)")
    ulmfit.add_argument("--text", required=True, help="target-domain text, one document "
                                                      "per line")
    ulmfit.add_argument("--train", required=True, help="TSV file: text<TAB>label")
    ulmfit.add_argument("--general-text", default=None,
                        help="general-domain text for stage 1 (default: skip it)")
    ulmfit.add_argument("--out", required=True, help="a new directory for the classifier")
    ulmfit.add_argument("--lm-epochs", type=int, default=1)
    ulmfit.add_argument("--epochs", type=int, default=None,
                        help="classifier epochs (default: one per layer group)")
    ulmfit.add_argument("--batch-size", type=int, default=64)
    ulmfit.add_argument("--sequence-length", type=int, default=70)
    ulmfit.add_argument("--vocabulary-size", type=int, default=60000)
    ulmfit.add_argument("--seed", type=int, default=0)
    ulmfit.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="AwdLstmBackbone config, e.g. --set hidden_size=256")
    ulmfit.set_defaults(run=_ulmfit)

    cvt = commands.add_parser(
        "cvt", help="cross-view training of a tagger: tagged TSV (token<TAB>tag, blank "
                    "line between sentences) + unlabelled sentences (Clark et al. 2018)")
    cvt.add_argument("--train", required=True)
    cvt.add_argument("--unlabelled", required=True, help="one sentence per line")
    cvt.add_argument("--out", required=True, help="a new directory for the tagger")
    cvt.add_argument("--steps", type=int, default=1000, help="labelled+unlabelled pairs")
    cvt.add_argument("--batch-size", type=int, default=64)
    cvt.add_argument("--vocabulary-size", type=int, default=20000)
    cvt.add_argument("--learning-rate", type=float, default=0.5,
                     help="peak learning rate of momentum SGD (cvt_text: 0.5)")
    cvt.add_argument("--warm-up-steps", type=int, default=5000,
                     help="updates of linear warm-up (cvt_text: 5000; each step makes "
                          "a labelled and an unlabelled update)")
    cvt.add_argument("--seed", type=int, default=0)
    cvt.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="CvtEncoder config, e.g. --set first_layer_size=256")
    cvt.set_defaults(run=_cvt)

    tag = commands.add_parser(
        "cvt-tag", help="tag sentences with a `keras-ctx cvt` tagger: prints one "
                        "word/TAG line per input line")
    tag.add_argument("run_dir", metavar="RUN_DIR", help="the --out directory of keras-ctx cvt")
    tag.add_argument("--input", required=True,
                     help="UTF-8 text, one whitespace-tokenised sentence per line")
    tag.add_argument("--batch-size", type=int, default=64)
    tag.set_defaults(run=_cvt_tag)
