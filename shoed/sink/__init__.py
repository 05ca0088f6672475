"""`shoed sink`: tables' events into PostgreSQL, exactly once (see docs/integrating.md)."""
