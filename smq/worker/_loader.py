"""Find a handler by its ``module:function`` name, as ``smq worker`` is given it."""

from __future__ import annotations

import importlib
import os
import sys

from .._errors import InvalidParameter
from ._slots import Handler


def load_handler(spec: str) -> Handler:
    """Import ``package.module:function`` (or ``module:object.attribute``) and return it.

    The current directory is searched first, as ``python -m`` would.
    Raises InvalidParameter naming what is wrong.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise InvalidParameter(f"handler {spec!r}: give it as MODULE:FUNCTION, such as app.tasks:handle")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidParameter(f"handler {spec!r}: cannot import {module_name!r}: {error}") from error
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidParameter(f"handler {spec!r}: {module_name!r} has no {attribute!r}") from None
    if not callable(target):
        raise InvalidParameter(f"handler {spec!r} is a {type(target).__name__}, not a function")
    return target
