#!/usr/bin/env bash
# The Python package's checks (issue 17), run by .ci/run and by hand from the repository root:
#
#   scripts/python-tests.sh
#
# Builds pslite's release binaries (the tests' scheduler and servers), makes a fresh virtual
# environment in target/pyenv, installs the package into it with `pip install ./python` (maturin
# builds it in this repository's target/, sharing the release build of the pslite crate), then
# lints the binding crate, checks the type stubs against the module (mypy's stubtest), runs the
# pytest tests (pslite.torch's among them), and one short interleaved Python-vs-Rust bench
# (figures printed, not asserted). Needs a Python 3.9+ with venv (python3, or $PYTHON) and PyPI
# for maturin, numpy, torch, pytest, mypy.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/need-debs.sh
PYTHON=${PYTHON:-python3}
export CARGO_TARGET_DIR=$PWD/target

need_debs procps  # pgrep, in the launcher tests
cargo build --release --bins
venv=target/pyenv
rm -rf "$venv"
if ! "$PYTHON" -m venv "$venv" 2>/dev/null; then
    # Debian's own python3 has no venv module without this package.
    need_debs python3-venv
    "$PYTHON" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip
# PyTorch, for pslite.torch's tests: what the package's torch extra brings (pip install
# './python[torch]', torch>=2.3). PyPI's Linux wheel loads the CUDA libraries even on a CPU:
# 3.5 GB to fetch, 4.4 GB installed. For CI's disk: no pip cache (it would keep a second copy of
# every wheel), and no triton (1 GB: torch.compile's GPU compiler, which nothing here uses;
# torch imports without it). So torch's other requirements come from its own metadata, and pip
# then names triton in a dependency-conflict line: expected.
"$venv/bin/python" -m pip install -q --no-cache-dir --no-deps 'torch>=2.3'
mapfile -t torch_deps < <("$venv/bin/python" -c 'import importlib.metadata as m
print("\n".join(r for r in m.requires("torch") or []
                if not r.startswith("triton") and "extra ==" not in r))')
"$venv/bin/python" -m pip install -q --no-cache-dir "${torch_deps[@]}"
"$venv/bin/python" -m pip install -q ./python pytest mypy
"$venv/bin/python" -c 'import pslite, torch; print("pslite", pslite.__version__, "from", pslite.__file__, "with torch", torch.__version__)'

cargo fmt --check --manifest-path python/Cargo.toml
cargo clippy --release --manifest-path python/Cargo.toml --all-targets -- -D warnings
# Outside the repository, so that the installed package (not python/python) is checked.
(cd /tmp && "$OLDPWD/$venv/bin/python" -m mypy.stubtest pslite)
"$venv/bin/python" -m mypy --ignore-missing-imports examples/python python/bench.py python/tests

# pslite.torch's tests fail instead of skipping when torch is missing.
PSLITE_REQUIRE_TORCH=1 "$venv/bin/python" -m pytest -q python/tests
"$venv/bin/python" python/bench.py compare --runs 1 --seconds 2
