"""Simulator: request workloads through the GPU cache and the CPU offload store.

Modules, one idea each:
  ssm        -- the selective state-space recurrence and the cold-state cache
  states     -- a saved Mamba state: position, clean or wrong, and where it came from
  chunking   -- how the scheduler splits a prefill in Mamba align mode
  workload   -- seeded traces: chat, shared-prefix, random
  gpu_cache  -- the GPU prefix cache and its longest hit
  cpu_store  -- the CPU offload store (LRU, asynchronous stores, pinned loads)
  engine     -- the discrete simulation of one engine under one semantics
  oracle     -- the best correct hit for a lookup (what a fix may give away)
  metrics    -- counters and the frozen per-semantics summary
  runner     -- one trace under several semantics (optionally in processes)
  report     -- table, JSON and plot
  rerun      -- the second-send prediction for the GPU end-to-end check
  progress   -- the stderr progress bar
  cli        -- python -m sim run|rerun
"""
