"""ccweb-store: durable SQL storage and cross-conversation messaging for cc-web."""

__version__ = "0.1.0"
