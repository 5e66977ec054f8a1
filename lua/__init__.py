"""smq's Lua scripts, as the package ``smq.lua`` (this folder is mapped there when installed).

A package, so that ``importlib.resources.files("smq.lua")`` finds the scripts in a checkout,
in an installed wheel and in a zip on ``sys.path`` (``smq spark-zip``) alike.
"""
