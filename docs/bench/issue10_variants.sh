set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export TKIR_CACHE=0
for c in "-D BM=64" "-D BM=32" "-D BM=16" "-D BM=16 -D BN=128" "-D BM=32 -D BN=128"; do
  for s in "--size M=8192 --size N=8192" "--size M=65536 --size N=4096"; do
    echo "transpose $c $s: $(timeout 60 tkc bench examples/transpose.tk $c $s 2>&1 | grep -E '^transpose|reaches' | tr '\n' ' ')"
  done
done
for c in "-D DC=512" "-D DC=1024" "-D DC=1024 -D WG=2"; do
  for s in "--size N=8192 -D D=8192" "--size N=65536 -D D=4096"; do
    echo "rmsnorm $c $s: $(timeout 60 tkc bench examples/rmsnorm.tk $c $s 2>&1 | grep -E '^rmsnorm|reaches' | tr '\n' ' ')"
  done
done
