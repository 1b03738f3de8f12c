"""zoo/: models named by spec (specs.py) and many models against many targets in one run (run.py)."""
