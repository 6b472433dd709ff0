#!/usr/bin/env bash
# The Jupyter and test packages the GPU image lacks, as wheels for Python 3.12 in .whl/
# (the device's README: carry `.whl`; tools/gpu_session.sh installs them there). The
# versions are this machine's .venv (pip show), so the device runs what CI runs. Left out
# to keep under the 64 MiB a call carries: the site builder (sphinx, babel, jupyter-cache,
# sqlalchemy), which runs only here, and the optional jedi and debugpy (IPython and ipykernel
# run without them).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx "/.whl/" .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo /.whl/ >> .git/info/exclude; }
pins=$(.venv/bin/python - <<'PY'
import importlib.metadata as md, re
from packaging.requirements import Requirement
roots = ["ipykernel", "nbclient", "nbformat", "myst-nb", "pytest-xdist", "pandas", "matplotlib", "pytest"]
leave = {"numpy", "sphinx", "babel", "jupyter-cache", "sqlalchemy", "jedi", "parso", "debugpy"}
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
seen, stack = {}, list(roots)
while stack:
    name = norm(stack.pop())
    if name in seen or name in leave or name.startswith("sphinx"):
        continue
    seen[name] = md.distribution(name).version
    for text in md.distribution(name).requires or []:
        req = Requirement(text)
        if not req.marker or req.marker.evaluate({"extra": ""}):
            stack.append(req.name)
print(" ".join(f"{k}=={v}" for k, v in sorted(seen.items())))
PY
)
platforms=""
for n in 17 24 26 27 28 31 34 35; do platforms="$platforms --platform manylinux_2_${n}_x86_64"; done
mkdir -p .whl
for pin in $pins; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 $platforms -d .whl "$pin" >/dev/null
done
echo "$(ls .whl | wc -l) wheels, $(du -sh .whl | cut -f1)"
