#!/usr/bin/env bash
# The documentation's code blocks, run by .ci/run and by hand from the repository root:
#
#   scripts/docs-check.sh [FILE.md...]     (default: all of them)
#
# Every fenced block of README.md, docs/*.md and python/README.md is compiled or run in CI:
# the rust blocks by `cargo test` (doctests: src/doc_examples.rs includes each file), every
# other block here, as its info string says (docs/README.md, "How the code blocks are
# checked"; scripts/docs-check.py does it). The sh blocks run against loopback, each under
# PSLITE_DOCS_TIMEOUT seconds (120), after the release build this script makes. The Python
# blocks run with $PSLITE_DOCS_PYTHON, else target/pyenv's (scripts/python-tests.sh builds it);
# without one they are only compiled, unless PSLITE_REQUIRE_LAUNCHERS=1 (CI) makes it an error.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/need-debs.sh
need_debs python3 procps
t0=$SECONDS
cargo build --release --bins
if [[ -z ${PSLITE_DOCS_PYTHON:-} && -x target/pyenv/bin/python ]]; then
    export PSLITE_DOCS_PYTHON=$PWD/target/pyenv/bin/python
fi
python3 scripts/docs-check.py "$@"
echo "docs-check: $((SECONDS - t0)) s"
