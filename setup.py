"""keras_ctx: contextual word representations (CoVe, ELMo, GPT, BERT, ...) for Keras 3."""

from setuptools import find_packages, setup

# Compatible ranges, so that installing keras_ctx into an environment keeps the
# versions it holds where they fit. The versions the tests ran against are pinned in
# constraints.txt: `pip install -e ".[test,docs]" -c constraints.txt` (README, .ci/run).
# TensorFlow, tensorflow-text and tensorboard move together, one minor release at a time;
# keras_ctx/common/compat.py fences the private upstream APIs the code reads.
INSTALL_REQUIRES = [
    "tensorflow>=2.21,<2.22",
    "tensorflow-text>=2.21,<2.22",
    "keras>=3.15,<4",
    "keras-hub>=0.32,<0.33",
    "tensorflow-datasets>=4.9,<5",
    "safetensors>=0.8,<1",
    "sentencepiece>=0.2,<1",
    "tokenizers>=0.23,<1",
    "tensorboard>=2.21,<2.22",
    "numpy>=2.0,<3",  # the 2.x ABI that TensorFlow 2.21 and JAX build against
]

# The main job's sense table as a PNG heatmap (optional: without it the table
# is printed only, and the job says so in one line).
PLOT_REQUIRES = ["matplotlib>=3.11,<4"]

# Keras' JAX backend on the CPU (KERAS_BACKEND=jax; docs/backends.md). TensorFlow stays
# the default backend and dependency.
JAX_REQUIRES = ["jax[cpu]>=0.10.2,<0.11"]

# Keras' torch backend (KERAS_BACKEND=torch). PyPI's Linux wheels are CUDA builds; the CPU
# build comes from PyTorch's CPU index (docs/backends.md gives the line), and
# constraints.txt pins the version the tests ran against.
TORCH_REQUIRES = ["torch>=2.13,<3"]

# Moses' rules in Python: XLM's tokenizer (keras_ctx.data.xlm_text; the tests compare it with
# transformers' XLMTokenizer) and CoVe's recipe's words (keras_ctx.data.cove_words).
MOSES_REQUIRES = ["sacremoses>=0.1.1,<0.3"]

TEST_REQUIRES = [
    "pytest>=9.2,<10",
    "pytest-xdist>=3.8,<4",
    "hypothesis>=6.170,<7",
    "ruff>=0.17.6,<0.18",  # tests/repository/test_lint.py: pyflakes' rules over the repository
    "transformers>=5.23,<6",  # tests/runs/test_tokenizer_files.py: AutoTokenizer on tokenizer/
] + PLOT_REQUIRES + JAX_REQUIRES + TORCH_REQUIRES + MOSES_REQUIRES  # the backends, XLM

# The documentation site (mkdocs.yml, docs/): `mkdocs build --strict` runs in the tests.
DOCS_REQUIRES = [
    "mkdocs>=1.6,<2",
    "mkdocs-material>=9.8,<10",
    "mkdocstrings>=1.0.8,<2",
    "mkdocstrings-python>=2.0,<3",
]

# ONNX export (keras_ctx.export.export_onnx) and ONNX Runtime; constraints.txt pins the
# versions it was checked with, which leave every other pin (protobuf included) as it is.
ONNX_REQUIRES = [
    "tf2onnx>=1.17,<2",
    "onnx>=1.23,<2",
    "onnxscript>=0.7,<1",  # torch.onnx's exporter (export_onnx on torch)
    "onnxruntime>=1.32,<2",
]

setup(
    name="keras-ctx",
    version="0.1.0",
    description=(
        "Keras 3 layers, backbones and pretraining objectives for contextual "
        "word representations: CoVe, ELMo, CVT, ULMFiT, GPT, GPT-2, GPT-3, BERT, "
        "RoBERTa, ALBERT, SpanBERT, ELECTRA, XLNet, T5, BART, mBERT, XLM, MAD-X."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["keras_ctx", "keras_ctx.*"]),
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require={"test": TEST_REQUIRES, "docs": DOCS_REQUIRES, "plot": PLOT_REQUIRES,
                    "onnx": ONNX_REQUIRES, "jax": JAX_REQUIRES, "torch": TORCH_REQUIRES,
                    "moses": MOSES_REQUIRES},
    entry_points={"console_scripts": ["keras-ctx=keras_ctx.cli:main"]},
)
