"""Demo data: the trips generator and the binlog demo behind 'sluice demo' / 'make run'."""
