#!/usr/bin/env bash
# accelerator_mlm on a machine that has JAX and a GPU but no TensorFlow and no internet.
#
# Here (with internet), once: benchmarks/gpu_check.sh --fetch
#   downloads constraints.txt's keras and keras-hub, and what they import that such a machine
#   lacks, as Python 3.12 wheels into .whl/ (keep .whl/ out of git).
# There, from the repository root, with .whl/ copied beside it:
#   benchmarks/gpu_check.sh [OUT [accelerator_mlm's flags, e.g. smaller shapes on a CPU]]
#   installs the wheels into a scratch directory (nothing system-wide), then times
#   BERT-base MLM steps of keras_ctx and keras-hub at batch 256 with dropout 0 (attention
#   through keras.ops.dot_product_attention: cuDNN flash attention) and 0.1 (the paper's),
#   appending both tables to benchmarks/RESULTS.md and copying it to OUT, with a profile
#   of each model's step at dropout 0.1 (OUT/NAME.xplane.pb, summed by op in
#   OUT/profile-summary.txt; benchmarks/profile_summary.py reads them anywhere).
#   Then the same step on PyTorch (benchmarks/backend_mlm.py, BERT-base, bf16).
#   Eight files in OUT, flat: what a lent machine's OUT brings back.
set -euo pipefail
cd "$(dirname "$0")/.."

# keras and keras-hub as constraints.txt pins them; the rest as the GPU image lacks them.
pin() { sed -n "s/^$1==\([^ ]*\).*/\1/p" constraints.txt; }
WHEELS=("keras==$(pin keras)" "keras-hub==$(pin keras-hub)" "namex==0.1.0" "optree==0.20.0"
        "kagglehub==1.0.3" "kagglesdk==0.1.38")

if [[ "${1:-}" == "--fetch" ]]; then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
  exit 0
fi

OUT="${1:-${OUT:-benchmarks/gpu-check}}"
EXTRA=("${@:2}")
mkdir -p "$OUT"
SITE="$(mktemp -d)"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
  .whl/*.whl
export PYTHONPATH="$SITE:$PWD" KERAS_BACKEND=jax PYTHONUNBUFFERED=1
{
  python3 -c "import jax, keras, keras_hub; print(jax.devices(), 'jax', jax.__version__, \
'keras', keras.__version__, 'keras-hub', keras_hub.__version__)"
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true
} 2>&1 | tee "$OUT/machine.txt"
for dropout in 0 0.1; do
  profile=()
  [[ "$dropout" == 0.1 ]] && profile=(--profile "$OUT")
  # Two BERT-base models compile (about a minute each on a GPU), then 3 x 10 timed steps each.
  timeout 280 python3 -m benchmarks.accelerator_mlm --batch 256 --dropout "$dropout" --record \
    "${profile[@]}" "${EXTRA[@]}" 2>&1 | tee "$OUT/accelerator_mlm-dropout-$dropout.txt" \
    || echo "accelerator_mlm --dropout $dropout failed or timed out (exit $?)"
done
# The same comparison on PyTorch (the machine's CUDA build): keras_ctx's and keras-hub's own
# train_on_batch, BERT-base, bf16, interleaved rounds (benchmarks/backend_mlm.py).
KERAS_BACKEND=torch timeout 200 python3 -m benchmarks.backend_mlm --size base --batch 64 \
  --precision mixed_bfloat16 --record 2>&1 | tee "$OUT/backend_mlm-torch.txt" \
  || echo "backend_mlm on torch failed or timed out (exit $?)"
cp benchmarks/RESULTS.md "$OUT/RESULTS.md"
if compgen -G "$OUT/*.xplane.pb" > /dev/null; then
  python3 -m benchmarks.profile_summary "$OUT"/*.xplane.pb > "$OUT/profile-summary.txt" 2>&1 \
    || echo "profile_summary failed (exit $?)"
fi
