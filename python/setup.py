# SPDX-License-Identifier: MIT
# setup.py - installs the pure-Python kt package (ctypes over libkt); no
# compiler and no download: `pip install ./python` works offline with
# Debian's python3-setuptools, because there is no pyproject.toml to ask
# pip for an isolated build environment.
from setuptools import setup

setup(
    name="kt",
    version="0.1.0",
    description="Python bindings of kt (MoE routed experts on the CPU), "
    "with a drop-in KTMoEWrapper",
    packages=["kt"],
    python_requires=">=3.9",
    license="MIT",
)
