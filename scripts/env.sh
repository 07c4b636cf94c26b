# Shared paths for oscar's scripts (sourced, not run). Override with environment variables.
export OSCAR_CACHE="${OSCAR_CACHE:-$HOME/.cache/oscar}"
export OSCAR_MODELS="${OSCAR_MODELS:-$OSCAR_CACHE/models}"
export OSCAR_VENV="${OSCAR_VENV:-$OSCAR_CACHE/venv}"
export OSCAR_MODEL="${OSCAR_MODEL:-$OSCAR_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf}"
export OSCAR_BUILD="${OSCAR_BUILD:-build}"
export OSCAR_CALIB_TEXT="${OSCAR_CALIB_TEXT:-$OSCAR_CACHE/data/calib.txt}"
export OSCAR_EVAL_TEXT="${OSCAR_EVAL_TEXT:-$OSCAR_CACHE/data/eval.txt}"
# The multi-domain calibration corpus (scripts/fetch-corpus.sh); `oscar calibrate` without -f
# reads it from here (the binary looks at OSCAR_CORPUS_DIR, then OSCAR_CACHE, the same way).
export OSCAR_CORPUS_DIR="${OSCAR_CORPUS_DIR:-$OSCAR_CACHE/data/corpus}"
# The cached calibration's directory under $OSCAR_CACHE/rotations/<model>/: 20 000 tokens of
# $OSCAR_CALIB_TEXT in 40 prompts, clip ratios searched per layer and key means (calibrate's defaults).
export OSCAR_ROTATIONS_NAME="${OSCAR_ROTATIONS_NAME:-seq20000_prompt40_clip_kmean}"
# The quick start's calibration: the same, on the multi-domain corpus (calibrate's default text).
export OSCAR_CORPUS_ROTATIONS_NAME="${OSCAR_CORPUS_ROTATIONS_NAME:-seq20000_prompt40_clip_kmean_corpus}"
