"""The suites shipped with attnbench (package data: ``*.yaml`` and ``lm_eval_tasks/``);
``attnbench.plan.shipped`` finds them by name."""
