"""Job and space files: loading, strict validation, frozen objects. On core and backends."""
