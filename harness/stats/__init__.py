"""Every statistical routine of attnbench (numpy/scipy only), shared by the planner, the finalizers
and the report: exact tests (exact), checks of the shape of per-seed differences (shape), the
group-sequential paired t (sequential) and the paired decision that reads all three (paired),
learned against the null level (learned), time to event (survival), t quantiles and bootstrap
intervals (intervals), speed slopes and crossovers (slopes), scaling laws (power_laws) and one
variant's scaling against the baseline's (scaling_comparison)."""
