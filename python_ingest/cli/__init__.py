"""The sluice command line: every sub-command and its output."""
