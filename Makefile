# The pipeline DAG. `make all` analyses MODEL (default: a locally built torchvision ResNet-50) into
# results/<stem>/, rebuilding only what is stale. `make test` runs the tests. Both create .venv first.
MODEL   ?= models/resnet50.onnx
# a '%' in a target makes it a pattern rule (make then deleted 7 results as intermediates): 'pct' in the stem
STEM    := $(subst %,pct,$(basename $(notdir $(MODEL))))
R       := results/$(STEM)
$(if $(findstring %,$(R)),$(error R=$(R): make cannot take a '%' in the results folder, choose another name))
PY      := .venv/bin/python
VENV    := .venv/.installed
HOST    ?= configs/host.yaml
WORKLOAD ?= configs/workload.yaml
OFFLOAD ?= configs/offload.yaml
SYSTEM  ?= configs/system.yaml
LATENCY_MODEL ?= configs/latency_model.yaml
RUNS    ?= 10
LIB     := $(shell find lib -name "*.py")
# The one input spec, given to every stage that shapes or feeds inputs (01, 02, 07, 08, 10):
#   SHAPE_ARGS="--shape-override 'input=8x3x224x224'"   PRESET=llm-128 (configs/workload.yaml)   INPUTS=feeds.npz
# and extra flags for stage 01, e.g. PROFILE_ARGS="--threads 1"
PROFILE_ARGS ?=
# a lock file (make zoo sets it, entries run side by side): stage 01 holds it exclusively, every other stage
# shared, so that a profile never shares the cores with another entry's stage (as make -j ensures for one model)
PROFILE_LOCK ?=
ifneq ($(PROFILE_LOCK),)
PY := flock -s $(PROFILE_LOCK) .venv/bin/python
endif
SHAPE_ARGS   ?=
PRESET       ?=
INPUTS       ?=
SPEC_ARGS    := $(SHAPE_ARGS) $(if $(PRESET),--preset $(PRESET)) $(if $(INPUTS),--inputs-npz $(INPUTS))

# a user's MODEL that does not exist: one clear line instead of make's "No rule to make target"
ifneq ($(filter all,$(or $(MAKECMDGOALS),all)),)
$(foreach v,MODEL INPUTS HOST WORKLOAD OFFLOAD SYSTEM LATENCY_MODEL,$(if $(word 2,$($(v))),$(error $(v)="$($(v))" has \
  a space in its path, which make cannot take: rename it or link it (ln -s), or run the stages by hand)))
ifneq ($(MODEL),models/resnet50.onnx)
ifeq ($(wildcard $(MODEL)),)
$(error MODEL=$(MODEL) not found (give the path of an ONNX file, or leave MODEL unset for the default ResNet-50))
endif
endif
endif

# Stamps: a different model behind the same path or stem, another input spec, RUNS or PROFILE_ARGS must
# rebuild what they affect. Each stamp file changes only when what it records changes. The file behind a symlink
# (stat -L): the link's own size and time stayed when another model or npz was put behind it. CONTENT_ID (make
# zoo passes the files' sha256): a model of the same size copied over MODEL with its timestamps kept (same size,
# mtime and inode) kept the old figures. Not the change time: 08's hard links into splits/ change it every run.
CONTENT_ID    ?=
SPEC_STAMP    := $(R)/.spec
PROFILE_STAMP := $(R)/.profile_args
FILE_ID        = $(shell stat -L -c '%s %Y %i' $(1) 2>/dev/null)
SPEC_OF        = $(abspath $(MODEL)) $(1) | $(SPEC_ARGS) | $(if $(INPUTS),$(call FILE_ID,$(INPUTS))) $(CONTENT_ID)
SPEC_TEXT     := $(call SPEC_OF,$(call FILE_ID,$(MODEL)))
PROFILE_TEXT  := $(RUNS) $(PROFILE_ARGS)
ifneq ($(filter all,$(or $(MAKECMDGOALS),all)),)
$(shell mkdir -p $(R); printf '%s\n' "$(SPEC_TEXT)" | cmp -s - $(SPEC_STAMP) || printf '%s\n' "$(SPEC_TEXT)" > $(SPEC_STAMP))
$(shell printf '%s\n' "$(PROFILE_TEXT)" | cmp -s - $(PROFILE_STAMP) || printf '%s\n' "$(PROFILE_TEXT)" > $(PROFILE_STAMP))
endif
# Another config file given by path (SYSTEM=my_system.yaml) must re-run what reads it even when that file is older
# than the results: one stamp per config variable records its path (an edit of the file itself: its mtime)
CONFIG_VARS := HOST WORKLOAD OFFLOAD SYSTEM LATENCY_MODEL
ifneq ($(filter all,$(or $(MAKECMDGOALS),all)),)
$(foreach v,$(CONFIG_VARS),$(shell echo "$(abspath $($(v)))" | cmp -s - $(R)/.path_$(v) || echo "$(abspath $($(v)))" > $(R)/.path_$(v)))
endif

# 03 run by hand with --no-profile beside 01's profile left a table of predicted times that is newer than the
# profile: make all merges the profile again (every later stage used the predicted times, and none said so)
ifneq ($(filter all,$(or $(MAKECMDGOALS),all)),)
ifneq ($(and $(wildcard $(R)/ops_latency.csv),$(shell grep -l '"latency_source": "none"' $(R)/merge_meta.json 2>/dev/null)),)
$(shell rm -f $(R)/ops_profile.csv)
endif
endif

.PHONY: all test calibrate calibrate-device sweep clean venv help fx zoo
.DELETE_ON_ERROR:

# exit 3 when 08's report lists splits that failed this run's validation (08's exit 1 is also a crash's)
CHECK_VALIDATION = $(PY) -c "import json, sys; f = json.load(open('$(R)/validation_report.json')).get('failed_this_run'); \
	f and (print('FAILED split validation: ' + ', '.join(f) + ' (see $(R)/validation_report.json and the report)', \
	file=sys.stderr), sys.exit(3))"

all: $(R)/report.html
	@echo "done: results in $(R)/; open $(R)/report.html (all models: results/index.html)"
	@$(CHECK_VALIDATION)

help:
	@echo "make all [MODEL=path.onnx]   run stages 01-08 and 11 into results/<stem>/ (default: $(MODEL))"
	@echo "    [SHAPE_ARGS=\"--shape-override 'x=8x3x224x224'\"] [PRESET=llm-128] [INPUTS=feeds.npz] [RUNS=10] [SPLITS=3]"
	@echo "    [HOST= WORKLOAD= OFFLOAD= SYSTEM= LATENCY_MODEL=]  other config files (default: configs/*.yaml)"
	@echo "make test                    run the tests"
	@echo "make all HAILO=1             ... with stage 10's Hailo check pruning split candidates (07 -> 10 -> 07)"
	@echo "make fx [TORCH_MODEL=resnet18]  stage 09: FX characterize, fuse, concurrency, hardware mapping + plot"
	@echo "make calibrate               measure this host's peak FLOP/s and bandwidth into $(HOST), fit $(LATENCY_MODEL)"
	@echo "make calibrate-device SCHEDULER=tcp://h:8786 DEVICE_DIR=configs/devices/npu RESOURCES=npu=1  the same on a Dask worker"
	@echo "make sweep MODEL=m.onnx [BATCHES=\"1 2 4 8 16\"] [ROUNDS=3]  measured vs predicted latency per batch -> sweep.csv"
	@echo "make zoo ZOO=zoo.yaml [ENGINE=dask SCHEDULER=tcp://host:8786] [JOBS=2]  every model of a zoo file -> results/zoo.csv"
	@echo "make clean                   remove results/ and models/"

venv: $(VENV)
$(VENV): requirements.txt
	python3 -m venv .venv
	.venv/bin/pip install -q --upgrade pip
	.venv/bin/pip install -q -r requirements.txt
	touch $@

# the embedded default model, built locally from torchvision (random weights, nothing downloaded)
# (the spec stamp, written before the model existed, takes its file id now: a second make all re-ran every stage)
models/resnet50.onnx: lib/onnx/export_models.py | $(VENV)
	$(PY) -m lib.onnx.export_models resnet50 $@
	$(if $(filter $@,$(MODEL)),mkdir -p $(R) && printf '%s\n' "$(call SPEC_OF,$$(stat -L -c '%s %Y %i' $@))" > $(SPEC_STAMP))

# the latency model's host reference models, built locally once where missing (make calibrate builds them too):
# without them a fresh clone's prediction was for the calibration host's speed, not this minute's
HOST_REF := $(if $(findstring --no-host-reference,$(PROFILE_ARGS)),,models/train/.host_reference)
models/train/.host_reference: $(LATENCY_MODEL) | $(VENV)
	mkdir -p $(@D)
	$(PY) -m lib.latency.host_reference $(LATENCY_MODEL)
	touch $@

# 01 runs after 02 (order-only) so that profiling never shares the cores with another stage under make -j
# 01 measures the latency model's host reference beside the model: a new calibration measures again
$(R)/ops_latency.csv: $(MODEL) 01_profile_onnx.py $(LIB) $(WORKLOAD) $(SPEC_STAMP) $(PROFILE_STAMP) $(LATENCY_MODEL) \
		$(R)/.path_WORKLOAD $(R)/.path_LATENCY_MODEL | $(VENV) $(R)/ops_metrics.csv $(HOST_REF)
	$(if $(PROFILE_LOCK),flock -x $(PROFILE_LOCK) .venv/bin/python,$(PY)) 01_profile_onnx.py --model $(MODEL) --results $(R) --workload $(WORKLOAD) --runs $(RUNS) --latency-model $(LATENCY_MODEL) $(PROFILE_ARGS) $(SPEC_ARGS)

$(R)/ops_metrics.csv: $(MODEL) 02_shapes_flops_bytes.py $(LIB) $(WORKLOAD) $(SPEC_STAMP) $(R)/.path_WORKLOAD | $(VENV)
	$(PY) 02_shapes_flops_bytes.py --model $(MODEL) --results $(R) --workload $(WORKLOAD) $(SPEC_ARGS)

$(R)/ops_profile.csv: $(R)/ops_latency.csv $(R)/ops_metrics.csv 03_merge_profile_metrics.py $(LIB) $(HOST) $(LATENCY_MODEL) \
		$(R)/.path_HOST $(R)/.path_LATENCY_MODEL
	$(PY) 03_merge_profile_metrics.py --model $(MODEL) --results $(R) --host $(HOST) --latency-model $(LATENCY_MODEL)

$(R)/critical_path.csv: $(R)/ops_profile.csv 04_critical_path.py $(LIB)
	$(PY) 04_critical_path.py --model $(MODEL) --results $(R)

$(R)/energy.csv: $(R)/ops_profile.csv 05_energy_estimate.py $(LIB) $(HOST) $(OFFLOAD) $(R)/.path_HOST $(R)/.path_OFFLOAD
	$(PY) 05_energy_estimate.py --model $(MODEL) --results $(R) --host $(HOST) --offload $(OFFLOAD)

# 07 uses 03's table (02's costs, 01's latencies for device A "measured"), and the two-device system.
# HAILO=1: 07 -> 10 (Hailo parse of the HAILO_TOPK best candidates) -> 07 again, pruning what Hailo rejects.
HAILO      ?=
HAILO_TOPK ?= 20
HAILO_ARCH ?= hailo8
# switching HAILO on or off (or its arch / top-k) must re-run 07: the stamp changes only when they do
SPLIT_MODE := $(R)/.split_mode
ifneq ($(filter all,$(or $(MAKECMDGOALS),all)),)
$(shell mkdir -p $(R); echo "$(HAILO) $(HAILO_ARCH) $(HAILO_TOPK)" | cmp -s - $(SPLIT_MODE) || echo "$(HAILO) $(HAILO_ARCH) $(HAILO_TOPK)" > $(SPLIT_MODE))
endif
$(R)/boundaries.csv: $(R)/ops_profile.csv 07_split_candidates.py $(LIB) $(SYSTEM) $(WORKLOAD) $(R)/.path_SYSTEM $(R)/.path_WORKLOAD \
		$(SPLIT_MODE) $(if $(HAILO),10_hailo_parse.py configs/hailo_ops.yaml)
	$(PY) 07_split_candidates.py --model $(MODEL) --results $(R) --system $(SYSTEM) --workload $(WORKLOAD) $(SPEC_ARGS)
	$(if $(HAILO),$(PY) 10_hailo_parse.py --model $(MODEL) --results $(R) --workload $(WORKLOAD) --top-k $(HAILO_TOPK) $(SPEC_ARGS))
	$(if $(HAILO),$(PY) 07_split_candidates.py --model $(MODEL) --results $(R) --system $(SYSTEM) --workload $(WORKLOAD) \
		--feasibility $(R)/hailo_feasibility.csv --feasibility-arch $(HAILO_ARCH) $(SPEC_ARGS))

# 08: export and validate the best few boundaries (SPLITS of them)
SPLITS ?= 3
# 08 exits 1 when a split fails its validation, after writing every report: kept (and the report built) when this
# run wrote it and lists failures, and `all` fails on it; any other failure (a crash exits 1 too) deletes it
RUN_08 = $(PY) 08_export_splits.py --model $(MODEL) --results $(R) --workload $(WORKLOAD) --top-k $(SPLITS) $(SPEC_ARGS)
$(R)/validation_report.json: $(R)/boundaries.csv 08_export_splits.py $(LIB) $(WORKLOAD) $(R)/.path_WORKLOAD
	$(info $(RUN_08))
	@touch $(R)/.08_started
	@$(RUN_08) || { rc=$$?; [ $$rc -eq 1 ] && [ $@ -nt $(R)/.08_started ] && { $(CHECK_VALIDATION) 2>/dev/null; [ $$? -eq 3 ]; } \
	|| exit $$rc; }

$(R)/plots/.done: $(R)/ops_profile.csv $(R)/critical_path.csv $(R)/energy.csv $(R)/boundaries.csv 06_plots.py $(LIB) $(HOST) \
		$(R)/.path_HOST
	$(PY) 06_plots.py --results $(R) --host $(HOST)
	touch $@

# 11: one self-contained page per model (and results/index.html across models), after everything else
$(R)/report.html: $(R)/plots/.done $(R)/validation_report.json $(R)/critical_path.csv $(R)/energy.csv \
		11_report.py $(LIB) $(wildcard lib/report/templates/*.j2)
	$(PY) 11_report.py --model $(MODEL) --results $(R)

# stage 09 on a PyTorch model (any torchvision name, or pkg.module:factory), then its plots
TORCH_MODEL ?= resnet18
fx: | $(VENV)
	$(PY) 09_fx_partition.py --model $(TORCH_MODEL)
	$(PY) 06_plots.py --results results/$(subst :,_,$(TORCH_MODEL))

calibrate: | $(VENV)
	$(PY) -m lib.latency.calibrate --host $(HOST) --system $(SYSTEM) --out $(LATENCY_MODEL)

# the same calibration on another device, through a Dask worker running on it (docs/latency-model.md)
RESOURCES ?= host_cpu=1
calibrate-device: | $(VENV)
	$(PY) -m lib.latency.calibrate --scheduler $(SCHEDULER) --device-dir $(DEVICE_DIR) --resources $(RESOURCES)

# measured and predicted latency, throughput and arithmetic intensity per batch -> results/<stem>/sweep.csv + plot
BATCHES ?= 1 2 4 8 16
ROUNDS ?= 3
sweep: | $(VENV)
	$(PY) -m lib.latency.sweep --model $(MODEL) --results $(R) --batches $(BATCHES) --runs $(RUNS) --rounds $(ROUNDS) $(SHAPE_ARGS) $(if $(PRESET),--preset $(PRESET))

# the pipeline over every entry of a zoo file (docs/zoo.md): local processes, or Dask workers with ENGINE=dask
ZOO       ?= zoo.yaml
ENGINE    ?= local
SCHEDULER ?=
JOBS      ?= 2
zoo: | $(VENV)
	$(PY) zoo.py --zoo $(ZOO) --engine $(ENGINE) $(if $(SCHEDULER),--scheduler $(SCHEDULER)) --jobs $(JOBS) \
		--runs $(RUNS) --splits $(SPLITS)

# the test files run side by side, one worker per core (pytest-xdist); a file stays on one worker (its fixtures,
# its Dask ports)
test: | $(VENV)
	$(PY) -m pytest -q -n auto --dist loadfile tests

clean:
	rm -rf results models
