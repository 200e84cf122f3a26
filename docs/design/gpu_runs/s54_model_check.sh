#!/usr/bin/env bash
# Session 54: main's llama_cuda_test on the default model (SmolLM2-135M Q4_1), whose 98 MB travel
# in three parts: build-carry-m1/model.part.1 copied to /tmp/m by the first call, part 2 appended
# by the second (STAGE=2), part 3 and main's llama_cuda_test by the third (STAGE=3).
set -u
out=${OUT:-o}; mkdir -p "$out" /tmp/bmain /tmp/m
untar() { python3 -c "import lzma,sys,tarfile; tarfile.open(fileobj=lzma.open(sys.argv[1])).extractall(sys.argv[2])" "$1" /tmp/bmain; }
case ${STAGE:?} in
  2) cat build-carry-m2/model.part.2 >> /tmp/m/model.part.1
     ls -l /tmp/m | tee "$out/stage2.txt" ;;
  3) cat /tmp/m/model.part.1 build-carry-m3/model.part.3 > /tmp/m/model.gguf && untar build-carry-m3/bins.tar.xz
     ls -l /tmp/m/model.gguf | tee "$out/summary.txt"
     lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
     export LD_LIBRARY_PATH=$(dirname "$lt"):${LD_LIBRARY_PATH:-}
     nvidia-smi --query-gpu=name --format=csv,noheader | tee -a "$out/summary.txt"
     TESSERA_MODEL=/tmp/m/model.gguf /tmp/bmain/llama_cuda_test > "$out/llama_cuda_test.log" 2>&1
     echo "rc=$?" | tee -a "$out/summary.txt"
     grep -E "PASSED|FAILED|GPU vs CPU|first difference|identical|one-row" "$out/llama_cuda_test.log" | tee -a "$out/summary.txt" ;;
esac
