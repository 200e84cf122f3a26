# Conveniences around the scripts (the README's quick start uses the scripts directly).
PROMPT ?= Why is the sky blue?

.PHONY: run test bench
run:
	./scripts/quickstart.sh "$(PROMPT)"

test:
	./scripts/test.sh

bench:
	./scripts/setup.sh >/dev/null && .venv/bin/python bench/llm_cpu_bench.py
