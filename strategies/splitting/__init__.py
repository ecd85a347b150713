"""Bundle splitting: the four algorithms and the automatic trigger."""
