#!/usr/bin/env bash
# Three chained device calls (session 61): the default model (SmolLM2-135M-Instruct Q4_1, 98 MB,
# carried in three pieces) on the GPU against the CPU after the greedy argmax moved into the decode
# graph and the step tables into one copy: every llama_cuda_test (teacher-forced agreement, graph
# steps against eager ones with greedy ids, greedy text of 5 prompts through the engine, the
# dummy-weight tests).
#   run(command="bash docs/design/gpu_runs/s61_model_check.sh a", carry=["build-carry-s61m/a"])
#   run(command="bash docs/design/gpu_runs/s61_model_check.sh a2", carry=["build-carry-s61m/a2"])
#   run(command="bash docs/design/gpu_runs/s61_model_check.sh b", carry=["build-carry-s61m/b"])
set -u
out=${OUT:-model_out}
. bench/cuda/gpu_probe.sh  # unxz_tar, use_device_cublaslt, gpu_clocks, gtest_line
mkdir -p /tmp/m "$out"
case $1 in
  a) cp build-carry-s61m/a/model.part.1 /tmp/m/; ls -l /tmp/m; exit 0 ;;
  a2) cat build-carry-s61m/a2/model.part.1b >> /tmp/m/model.part.1; ls -l /tmp/m; exit 0 ;;
esac
cat /tmp/m/model.part.1 build-carry-s61m/b/model.part.2 > /tmp/m/model.gguf
mkdir -p /tmp/mbin && unxz_tar build-carry-s61m/b/bins.tar.xz /tmp/mbin
use_device_cublaslt
s=$out/summary.txt
gpu_clocks $s
sha256sum /tmp/m/model.gguf | tee -a $s
TESSERA_MODEL=/tmp/m/model.gguf timeout 400 /tmp/mbin/llama_cuda_test > $out/llama.txt 2>&1
echo "rc $?" >> $out/llama.txt
gtest_line "llama_cuda_test" $out/llama.txt | tee -a $s
grep -E "GPU vs CPU|first difference|identical|chunks of|Failure|rc " $out/llama.txt | head -20 | tee -a $s
