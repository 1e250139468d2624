"""Reports a person opens: the run dashboard (``<state_dir>/reports/index.html``), each job's
error summary, and the assets the expectation reports (Great Expectations Data Docs) load,
vendored once at set-up so every page works offline (docs/reports.md)."""
