"""What every keras_ctx package shares: errors, input validation, atomic files,
progress lines, start-up settings and the private upstream APIs (compat)."""
