"""The one-command GPU check (issue 41): environment, the CUDA trust gate, a bf16 training
smoke, GPT-2 small throughput and MFU, speed and memory against length, and a one-page summary,
all in one output folder. Entry: scripts/gpu_check.sh; ``--dry-run`` runs it on CPU at tiny sizes."""
