"""Shared logic of the analysis pipeline: every computation lives here, stage scripts only wire it."""
import importlib.util
import sys

_DEFERRED = []


def lazy_import(name: str):
    """The module, loaded at the first use of one of its attributes (importlib's LazyLoader). For pandas in
    the modules stages 02 and 07 import: its 0.3 s import would delay the fork of 02's inference child (it is
    done while that child infers instead: finish_imports) and of 07's sweep child. An `import pandas` statement elsewhere loads it at once
    (the import system reads the module's __spec__)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _DEFERRED.append(module)
    return module


def finish_imports() -> None:
    """Load what lazy_import() deferred, now (nothing to do once loaded)."""
    for module in _DEFERRED:
        module.__name__      # noqa: B018 - the first attribute read loads it
