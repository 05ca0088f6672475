"""The journal, the outbox and the durable step."""
