"""Size limits on user input (issue 12): bounded work for any input.

Every limit is far above what a real training job or a hand-written input file reaches, and far below
what makes the planner hang or exhaust memory. Input beyond a limit is bad input (exit 2, naming the
file or option, the field and the limit). Where each is enforced: files in io/yamlio.py, clusters in
io/catalog.py (and io/runs.py), model shapes in specs/model.py, jobs in specs/job.py, strategies in
specs/strategy.py, command-line numbers in cli/values.py.
"""

from __future__ import annotations

# -- clusters and jobs ---------------------------------------------------------------------------------
MAX_DEVICES = 1 << 20            # 1,048,576 accelerators in a cluster (largest jobs today: ~1e5)
MAX_DEVICES_PER_NODE = 1 << 16  # 65,536 devices joined by one scale-up domain (NVL72: 72; a TPU v5p pod: 8,960)
MAX_GROUPS = 64                  # chip groups in one cluster
MAX_GLOBAL_BATCH = 1 << 24       # 16,777,216 sequences per optimizer step
MAX_SEQ_LEN = 1 << 24            # 16,777,216 tokens per sequence
MIN_LINK_RATE = 1e-3             # a topology's link rates (GB/s or Gb/s per device, GB/s per node bridge): 1 MB/s
MAX_LINK_RATE = 1e6              # to 1 PB/s (NVLink 5: 900 GB/s); 5e-324 divided to infinity, 1e308 overflowed
MAX_LINK_LATENCY_US = 1e7        # a bridge's latency: 10 s at most (CPU-forwarding bridges: ~30 us)
MIN_STEP_TIME_S = 1e-6           # a measured step time in a runs file: 1 us at least (1e-320 made errors +inf %)

# -- model shapes ----------------------------------------------------------------------------------------
MAX_LAYERS = 10_000              # transformer layers (largest published: ~200)
MAX_WIDTH = 1 << 20              # hidden, ffn_hidden, expert_ffn_hidden, head_dim, heads: 1,048,576
MAX_VOCAB = 1 << 24              # 16,777,216 tokens
MAX_EXPERTS = 1 << 16            # 65,536 experts (and top_k, shared experts)

# -- command-line search options ----------------------------------------------------------------------------
MAX_TOP = 1000                   # --top plans printed
MAX_TIME_LIMIT_S = 1e6           # --time-limit seconds (11.6 days)
MAX_PRICE_USD = 1e6              # USD per device-hour (list prices today: ~1-15); 1e308 made bare Infinity in JSON
MAX_TOKENS = 1e18                # tokens to train (largest runs today: ~4e13)
MAX_CANDIDATES = 2_000_000       # homogeneous search space (largest real one measured: ~400,000, an MoE model
                                 # on 16k GPUs); beyond it the user pins or caps dimensions

# -- input files --------------------------------------------------------------------------------------------
MAX_INPUT_BYTES = 8 << 20        # 8 MiB: model, chip, topology, profile, runs and config.json files
MAX_PLAN_BYTES = 64 << 20        # 64 MiB: plan files (one placement row per device, ~125 B each)
MAX_DEPTH = 64                   # nesting of mappings and lists in a file
MAX_ALIAS_NODES = 100_000        # values a YAML file's aliases (*name) may add when expanded
MAX_INT = (1 << 63) - 1          # any integer in a file: |n| <= 2^63 - 1
MAX_RUN_ROWS = 10_000            # rows of a runs file (`backtest`): the published set has ~50
