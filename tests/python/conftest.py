"""Makes the freshly built package importable: <build>/python comes first on sys.path."""
import os
import sys

_build = os.environ.get("TESSERA_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
_py = os.path.abspath(os.path.join(_build, "python"))
if os.path.isdir(os.path.join(_py, "tessera")) and _py not in sys.path:
    sys.path.insert(0, _py)
