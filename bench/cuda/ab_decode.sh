#!/usr/bin/env bash
# Same-call A/B of tessera binaries on batch-1 decode (dummy Llama-3-8B weights, 512 context),
# alternating binaries and weight types over two rounds, so drift between calls cannot decide.
# On the GPU machine after gpu_run.sh a / b (binaries in /tmp/bin; the second one packed with
# gpu_pack.sh's EXTRA_BINS):  BINS="tessera_main tessera" TYPES="q4_0 q8_0" bash bench/cuda/ab_decode.sh
# Extra environment for every run (e.g. TESSERA_MMQ_K_SPLIT=1) can be given as ENV_B="VAR=value"
# for the second binary only. Prints one line per run; appends them to $OUT/ab.txt.
d=$(dirname "$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)")
export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-}
read -r -a bins <<< "${BINS:-tessera_main tessera}"
for round in 1 2; do for t in ${TYPES:-q4_0 q8_0}; do for i in "${!bins[@]}"; do
  env_b=(); [ "$i" -eq 1 ] && [ -n "${ENV_B:-}" ] && env_b=($ENV_B)
  r=$(env "${env_b[@]}" /tmp/bin/${bins[$i]} bench -m /tmp/m/model.gguf --device cuda --dummy llama3-8b \
      --dummy-type "$t" --decode-ctx 512 --decode-tokens 64 --prefill 64 --batch 2 --batch-gen 2 2>&1 |
      grep 'decode, batch 1')
  echo "round $round $t ${bins[$i]} ${env_b[*]}: $r"
done; done; done | tee -a "${OUT:-.}/ab.txt"
