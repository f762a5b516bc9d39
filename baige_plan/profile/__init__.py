"""`baige-plan profile`: measure the local accelerator and write a measured chip file.

- measure.py (torch, imported lazily): GEMM grid, HBM copy bandwidth, NCCL collectives;
  writes the raw measurements as JSON (schema baige-plan/profile-raw/v1).
- fit.py (numpy only): raw measurements -> efficiency curve, bandwidth fractions, latency.
- writer.py (no torch): fitted figures + a datasheet chip file -> a chip YAML in the
  catalog format (baige_plan/io/chips.py), written atomically and byte-reproducibly.
"""
