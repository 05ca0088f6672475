"""The machine-readable contract: JSON Schemas and the AsyncAPI document."""
