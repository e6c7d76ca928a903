# Sourced by the scripts (`. scripts/venv.sh`, from the repository root) after
# scripts/install_deps.sh made .venv/: activates that virtual environment, so python3, pip,
# cmake and pytest are .venv's and nothing is installed into the system Python (Debian's refuses:
# PEP 668, externally-managed-environment). By hand: `. .venv/bin/activate` does the same.
if [ ! -x "$PWD/.venv/bin/python" ]; then
  echo "$PWD/.venv is missing: run bash scripts/install_deps.sh first" >&2
  return 1
fi
export VIRTUAL_ENV="$PWD/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
unset PYTHONHOME
hash -r
