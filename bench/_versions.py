"""Installed package versions, recorded with each benchmark's results."""

from __future__ import annotations

from importlib import metadata


def versions(*packages: str) -> dict[str, str]:
    """package -> installed version, or "not installed"."""
    found = {}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found
