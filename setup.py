"""keras_ctx: contextual word representations (CoVe, ELMo, GPT, BERT, ...) for Keras 3."""

from setuptools import find_packages, setup

# Pinned so that a fresh install gets exactly what the test suite ran against.
INSTALL_REQUIRES = [
    "tensorflow==2.21.0",
    "tensorflow-text==2.21.1",
    "keras==3.15.1",
    "keras-hub==0.32.0",
    "tensorflow-datasets==4.9.10",
    "safetensors==0.8.0",
    "sentencepiece==0.2.3",
    "tokenizers==0.23.3",
    "tensorboard==2.21.0",
    "numpy==2.4.6",
]

# The main job's sense table as a PNG heatmap (optional: without it the table
# is printed only, and the job says so in one line).
PLOT_REQUIRES = ["matplotlib==3.11.2"]

# Keras' JAX backend on the CPU (KERAS_BACKEND=jax; docs/backends.md): the version the
# backend tests ran against. TensorFlow stays the default backend and dependency.
JAX_REQUIRES = ["jax[cpu]==0.10.2"]

TEST_REQUIRES = [
    "pytest==9.2.0",
    "pytest-xdist==3.8.0",
    "hypothesis==6.170.17",
    "ruff==0.17.6",  # tests/test_lint.py: pyflakes' rules over the repository
] + PLOT_REQUIRES + JAX_REQUIRES  # the tests compare the backends

# The documentation site (mkdocs.yml, docs/): `mkdocs build --strict` runs in the tests.
DOCS_REQUIRES = [
    "mkdocs==1.6.1",
    "mkdocs-material==9.8.2",
    "mkdocstrings==1.0.8",
    "mkdocstrings-python==2.0.11",
]

# ONNX export (keras_ctx.export.export_onnx) and ONNX Runtime: the versions it was
# checked with; they leave every pin above (protobuf included) as it is.
ONNX_REQUIRES = [
    "tf2onnx==1.17.0",
    "onnx==1.23.2",
    "onnxruntime==1.32.0",
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
                    "onnx": ONNX_REQUIRES, "jax": JAX_REQUIRES},
    entry_points={"console_scripts": ["keras-ctx=keras_ctx.cli:main"]},
)
