# Sourced by the device scripts in scripts/bench/: install the carried wheels (.whl/: lark, filecheck,
# pytest-xdist, execnet, ... where the GPU machine lacks them; docs/bench/README.md says how to fetch them) into
# /tmp/site, then tkir itself (editable), with the disk cache off so every compile really runs LLVM and ptxas.
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export TKIR_CACHE=0 PYTHONUNBUFFERED=1
