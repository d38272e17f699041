"""The SDK's version: Lizard's own (internal/version/VERSION; a Go test keeps them equal)."""

__version__ = "0.1.0"
