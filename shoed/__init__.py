"""shoed: the controller daemon for an electronic baccarat card shoe."""

__version__ = "0.1.0"
