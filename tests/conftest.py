import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

if os.environ.get("OLC_MUTANT"):
    # python -m proofs --mutants: run the suite against one mutant of model and encoding
    import importlib
    import pkgutil

    for pkg in ("model", "proofs"):
        for info in pkgutil.walk_packages([str(Path(__file__).resolve().parent.parent / pkg)],
                                          prefix=f"{pkg}."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    from proofs.mutants import applied

    applied(os.environ["OLC_MUTANT"]).__enter__()
