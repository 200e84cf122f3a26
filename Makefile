# Quick start:  make run PROMPT="Why is the sky blue?"   then   make test
PROMPT ?= Why is the sky blue?
N ?= 128
ARGS ?=

.PHONY: setup run test bench build
setup:
	./scripts/setup.sh

build:
	cmake --build build -j"$$(nproc)"

run: setup
	./build/tessera run --chat -n $(N) $(ARGS) "$(PROMPT)"

test: setup
	ctest --test-dir build --output-on-failure -j2

bench: setup
	.venv/bin/python bench/llm_cpu_bench.py
