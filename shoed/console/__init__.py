"""The table console: a web page for the pit, surveillance and the table's own display.

`shoed console` serves the page (static files in ``static/``); the page itself talks MQTT
over WebSockets to the broker with the user's own credentials (docs/console.md).
"""

from .server import ConsoleError, ConsoleServer, page_config, serve_console, start_console

__all__ = ["ConsoleError", "ConsoleServer", "page_config", "serve_console", "start_console"]
