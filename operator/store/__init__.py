"""Store: what the operator keeps between cycles and for later — the history (Parquet), the aggregated load
profile the Spark job writes, snapshot files, the state file, and the control file of drains and proposals."""
