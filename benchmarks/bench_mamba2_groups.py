"""Mamba2 with its scores C B^T once per group (this checkout) against once per head (an older
checkout's Mamba2 class, run on this checkout's kernel without dt, which is the per-head scan):
one process, one thread, step by step interleaved with a softmax control (issue 42).

    git worktree add /tmp/old2 e31d51d
    python benchmarks/bench_mamba2_groups.py findings 9 [/tmp/old2]
    python benchmarks/bench_mamba2_groups.py long 3 [/tmp/old2]

Prints the two models' largest logit difference (same weights), best-of ms per train step,
new/old and softmax's time over each (the speed-up over softmax).
"""

import importlib.util
import sys
import time

import torch

from attnbench import Backbone, ModelConfig
from attnbench.registry.loader import load_registry

torch.set_num_threads(1)
OLD = sys.argv[3] if len(sys.argv) > 3 else "/tmp/old2"
spec = importlib.util.spec_from_file_location("old_mamba2", f"{OLD}/plugins/recurrent/mamba2.py")
assert spec is not None and spec.loader is not None
om = importlib.util.module_from_spec(spec)
sys.modules["old_mamba2"] = om
spec.loader.exec_module(om)
shape, reps = sys.argv[1], int(sys.argv[2])
d, L, H, T, batch = {"findings": (64, 2, 2, 64, 64), "long": (128, 2, 4, 8192, 1)}[shape]
reg = load_registry()
v = reg.get("mamba2")
cfg = ModelConfig(vocab_size=256, d_model=d, n_layer=L, n_head=H, context=T, dropout=0.0)
torch.manual_seed(0)
new = Backbone(cfg, v.build_mixer).train()
torch.manual_seed(0)
old = Backbone(cfg, om.Mamba2).train()
soft = Backbone(cfg, reg.get("softmax").build_mixer).train()
x = torch.randint(0, 256, (batch, T), generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    print("max |new - old| logits:", (new(x).logits - old(x).logits).abs().max().item())
best = {"old": 1e9, "new": 1e9, "softmax": 1e9}
for i in range(reps + 1):
    for k, m in (("old", old), ("new", new), ("softmax", soft)):
        t = time.perf_counter()
        m(x, x).loss.backward()
        m.zero_grad(set_to_none=True)
        if i:
            best[k] = min(best[k], time.perf_counter() - t)
print(
    shape,
    {k: round(v * 1e3, 1) for k, v in best.items()},
    "new/old",
    round(best["new"] / best["old"], 3),
    "softmax/new",
    round(best["softmax"] / best["new"], 2),
    "softmax/old",
    round(best["softmax"] / best["old"], 2),
)
