#!/usr/bin/env bash
# What benchmarks/gpu/check.py needs on a lent GPU machine that has no network, packed here
# into .gpu/ (git-ignored, ~15 MB) so that it travels with the working tree.
#
#   bash benchmarks/gpu/prepare.sh pack      # here, with PyPI reachable: fills .gpu/
#   bash benchmarks/gpu/prepare.sh install   # there: installs the wheels into /tmp/site
#
# Then, there (the command of a device run that carries .gpu):
#   bash benchmarks/gpu/prepare.sh install && export PYTHONPATH=/tmp/site:src \
#     TRIPOD_CACHE=$PWD/.gpu/cache && python3 benchmarks/gpu/check.py
#
# Why each piece: the machine's image (Python 3.12, torch with CUDA, transformers 5.17 as
# last read) lacks pydantic, which tripod's config imports, and has an older transformers
# than the one tripod pins and tests (5.23.0: the attention registry and cache details the
# sampler and the packed pass rely on). The check builds its model from a config with random
# weights, so of SmolLM2 only the tokenizer travels; `smollm2_dir` looks for a converted
# model folder, so an empty model.safetensors stands in for the 514 MB weights (never read).
set -euo pipefail
cd "$(dirname "$0")/../.."
WHEELS=(pydantic==2.13.4 pydantic-core==2.46.4 annotated-types==0.7.0
        typing-inspection==0.4.2 transformers==5.23.0)

pack() {
  rm -rf .gpu && mkdir -p .gpu/whl .gpu/cache/models/smollm2-135m-instruct
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/whl "${WHEELS[@]}"
  local src dst=.gpu/cache/models/smollm2-135m-instruct
  src=$(.venv/bin/python -c "from tripod.policy.models import smollm2_dir; print(smollm2_dir())")
  for f in config.json generation_config.json tokenizer.json tokenizer_config.json \
           chat_template.jinja; do
    [ -f "$src/$f" ] && cp "$src/$f" "$dst/"
  done
  : > "$dst/model.safetensors"
  du -sh .gpu
}

install() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl
}

case "${1:-}" in
  pack) pack ;;
  install) install ;;
  *) echo "usage: $0 pack|install" >&2; exit 2 ;;
esac
