"""Statistics shared by the planner and the report: exact (distribution-free) tests, checks of the
shape of per-seed differences, and the paired decision rule that reads both."""
