"""Pure game and procedure code: no I/O, no clock, no asyncio. mypy strict."""
