"""What the backend tests share: a config's command line, checked first as validate does."""

from __future__ import annotations


def checked_argv(backend, config: dict, port: int = 8000) -> list[str]:
    """``check_config`` then ``launch_spec``'s argv: what ``validate --commands`` prints."""
    backend.check_config(config)
    return backend.launch_spec(config, "127.0.0.1", port).argv
