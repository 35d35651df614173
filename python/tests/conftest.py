# The package under test: HYDRAGEN_PYTHON_PATH (the build tree's python/ folder, which ctest
# sets) first on sys.path, else whatever `import hydragen` finds (an installed package).
# HYDRAGEN_CLI: the `hydragen` binary the generate tests compare with.
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if os.environ.get("HYDRAGEN_PYTHON_PATH"):
    sys.path.insert(0, os.environ["HYDRAGEN_PYTHON_PATH"])


@pytest.fixture(scope="session")
def cli():
    path = os.environ.get("HYDRAGEN_CLI") or shutil.which("hydragen")
    if not path:
        for build in ("build-cpu", "build"):
            candidate = os.path.join(ROOT, build, "hydragen")
            if os.path.exists(candidate):
                path = candidate
                break
    assert path, "the hydragen CLI: set HYDRAGEN_CLI"
    return path


@pytest.fixture(scope="session")
def tiny():
    import hydragen

    return hydragen.LLM(random_weights="tiny", device="cpu", kv_memory="64MiB", page_size=16)
