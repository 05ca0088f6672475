"""Test equipment: the simulated shoe, its USB backend, a private broker, the demo.

Never imported by the product (the daemon, the CLI's `run`)."""
