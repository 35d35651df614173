"""Builds the extension `hydragen._hydragen` with the repository's CMake (the folder above this
one) and puts it into the package. Environment: HYDRAGEN_BUILD_DIR reuses a configured build
directory (e.g. the one ctest runs in); HYDRAGEN_CUDA (AUTO, ON, OFF) as for the project;
CMAKE_BUILD_PARALLEL_LEVEL as for CMake."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("HYDRAGEN_BUILD_DIR") or os.path.join(HERE, "build", "cmake")
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            subprocess.check_call([
                "cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                f"-DHYDRAGEN_CUDA={os.environ.get('HYDRAGEN_CUDA', 'AUTO')}", "-DHYDRAGEN_PYTHON=ON",
                "-DHYDRAGEN_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}"])
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build, "--target", "_hydragen", "-j", jobs])
        built = [f for f in os.listdir(os.path.join(build, "python", "hydragen")) if f.startswith("_hydragen")]
        if len(built) != 1:
            raise RuntimeError(f"expected one _hydragen extension under {build}/python/hydragen, found {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(build, "python", "hydragen", built[0]), target)
        presets = os.path.join(os.path.dirname(target), "presets")  # random_weights= finds them here
        shutil.rmtree(presets, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "presets"), presets)


setup(ext_modules=[Extension("hydragen._hydragen", sources=[])], cmdclass={"build_ext": CMakeBuild})
