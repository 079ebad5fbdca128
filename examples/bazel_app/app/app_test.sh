#!/usr/bin/env bash
# The app runs from its runfiles and the loader refuses a batch past the declared range.
set -euo pipefail
out=$(app/app)
echo "$out"
grep -q "^batch 16: output 16 x 3$" <<<"$out"
grep -q "^batch 17: refused: TinyPt2: input 'features' dim 0 is 17, outside \[1, 16\]" <<<"$out"
