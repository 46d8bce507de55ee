#!/usr/bin/env bash
# The GPU check in one command (issue 41): environment, `attnbench check --device cuda` (fp32, bf16
# and fp16 autocast), a 200-step bf16 training smoke of every built-in variant and one hybrid,
# GPT-2 small compiled (tokens/s, MFU), speed and memory for T = 1K..32K, the report and a
# one-page summary, all under OUT; 9 minutes on one H100 or H200. The driver: benchmarks/gpu_check/.
#
#   scripts/gpu_check.sh OUT [--dry-run] [--steps env,check,...] [--budget SECONDS] [--parse-only]
#                                               (steps: env check smoke gpt2 speed fla report)
#   scripts/gpu_check.sh --prepare        # here, before a device call: fills .whl/ (below)
#
# --dry-run: the same steps on CPU at tiny sizes, under 90 s (tests/test_gpu_check.py runs it).
# The arguments are checked first, before anything is installed or run (--parse-only stops there):
# --budget a finite number of seconds (>= 5), --steps naming at least one known step, OUT a folder
# path (an existing file there is refused).
#
# Reaching the lent GPU machine (see the device tool's notes): it has no network; only the
# working tree (64 MiB) and the paths named in `carry` travel. Its python3 (3.12) holds torch,
# triton, numpy, pandas, scipy, seaborn, pyyaml, pluggy, pytest-benchmark, einops, tokenizers; attnbench
# needs besides only pydantic (with pydantic-core, annotated-types, typing-inspection,
# typing-extensions) and, for `kernel: fla`, fla-core. So:
#   1. here: `scripts/gpu_check.sh --prepare` downloads those wheels (cp312, manylinux x86-64,
#      versions from constraints.txt) and setuptools into .whl/ (git-ignored, about 5 MB);
#   2. the call carries .whl; this script, finding attnbench not importable, installs the wheels
#      and then attnbench itself from the working tree (--no-index --no-build-isolation) into
#      /tmp/gpu-check-site, put first on PYTHONPATH;
#   3. torch: the machine's, when it meets pyproject's floor (torch>=2.4, read from pyproject.toml by
#      torch_ok below); below it, a carried
#      .whl/torch-*.whl is installed (a CUDA torch wheel is far over the 64 MiB carry limit, so
#      in practice the environment step then fails and says why; it never fakes the rest).
#   (Tried here on a Python venv holding only those image packages: the install and the dry run passed.)
# The device call: command `bash scripts/gpu_check.sh /tmp/gc; s=$?; tar czf $OUT/gpu_check.tgz -C /tmp gc;
# cp /tmp/gc/summary.* $OUT/; exit $s`, carry [".whl"], timeout_s 600 (the reply's output_tail
# ends with summary.md; $OUT returns at most 8 files, so the folder travels as one archive).
# A rerun of some steps into the same folder, on the still-warm machine: --steps speed,report.
# kernel: fla against SDPA is opt-in, one device call of its own (first use compiles for minutes):
# --steps env,fla,report.
set -euo pipefail
case "${1:-}" in  # OUT (the first argument) is relative to the caller's folder, not the checkout's
  "" | -* | /*) ;;
  *) set -- "$PWD/$1" "${@:2}" ;;
esac
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS="pydantic pydantic-core annotated-types typing-inspection typing-extensions fla-core setuptools"
SITE=${GPU_CHECK_SITE:-/tmp/gpu-check-site}

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p .whl
  # shellcheck disable=SC2086
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -c constraints.txt -d .whl $WHEELS
  ls -l .whl
  exit 0
fi

# The arguments, checked before anything is installed or run (the driver needs only PyYAML for this);
# a bad one ends here with its message and exit code 2.
"$PY" -m benchmarks.gpu_check "$@" --parse-only >/dev/null

torch_ok() {  # the machine's torch meets pyproject's floor
  "$PY" - <<'EOF'
import re, sys
floor = re.search(r'"torch>=([0-9.]+)', open("pyproject.toml").read()).group(1)
try:
    import torch
except ImportError:
    sys.exit(1)
have = tuple(int(x) for x in re.findall(r"\d+", torch.__version__.split("+")[0])[:2])
sys.exit(0 if have >= tuple(int(x) for x in floor.split(".")[:2]) else 1)
EOF
}

if ! "$PY" -c "import attnbench, pydantic" 2>/dev/null; then
  echo "[gpu-check] attnbench is not importable: installing it and the carried wheels into $SITE"
  pip_install() { "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@"; }
  shopt -s nullglob
  deps=(.whl/*.whl)
  torch_wheels=(.whl/torch-*.whl)
  keep=()
  for w in "${deps[@]}"; do case "$w" in .whl/torch-*) ;; *) keep+=("$w") ;; esac; done
  [ ${#keep[@]} -gt 0 ] && pip_install "${keep[@]}"
  if ! torch_ok && [ ${#torch_wheels[@]} -gt 0 ]; then
    echo "[gpu-check] the machine's torch is below the floor: installing ${torch_wheels[*]}"
    pip_install "${torch_wheels[@]}"
  fi
  [ ${#keep[@]} -gt 0 ] || echo "[gpu-check] no wheels in .whl/: run scripts/gpu_check.sh --prepare here and carry .whl" >&2
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  pip_install --no-build-isolation .
fi

exec "$PY" -m benchmarks.gpu_check "$@"
