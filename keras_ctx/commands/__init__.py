"""What each `keras-ctx` command runs, as a Python function that takes arguments.

One module per command; `keras_ctx.cli` only parses arguments and calls these:

| command    | function                                         |
| ---------- | ------------------------------------------------ |
| pretrain   | `keras_ctx.commands.pretrain.pretrain`           |
| prepare    | `keras_ctx.commands.prepare.prepare`             |
| finetune   | `keras_ctx.commands.finetune.finetune`           |
| embed      | `keras_ctx.commands.embed.embed`                 |
| export     | `keras_ctx.commands.export.export_run`           |
| convert    | `keras_ctx.commands.convert.convert`             |
| generate   | `keras_ctx.commands.generate.generate`           |
| ulmfit     | `keras_ctx.commands.ulmfit.ulmfit_from_files`    |
| cvt        | `keras_ctx.commands.cvt.cvt_from_files`          |
| cvt-tag    | `keras_ctx.commands.cvt_tag.tag_file`            |
| presets    | `keras_ctx.commands.presets.presets`             |
| layers     | `keras_ctx.commands.layers.layers`               |

The run-directory helpers they share are `keras_ctx.runs`; `sense_table` is the
table `pretrain` closes with. Modules are imported on use (`keras-ctx presets`
does not pay for TensorFlow's training stack).
"""
