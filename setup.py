"""Maps the repository's top-level folders onto one import namespace.

``engine/``, ``metrics/`` and ``benchmarks/`` install as ``evaldag.engine``,
``evaldag.metrics`` and ``evaldag.benchmarks`` (``evaldag`` itself is a PEP 420
namespace), so nothing is ever importable as a bare ``engine`` or ``metrics``.
Everything else about the distribution lives in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

TOP = ("engine", "metrics", "benchmarks")

packages, package_dir = [], {}
for top in TOP:
    packages.append(f"evaldag.{top}")
    package_dir[f"evaldag.{top}"] = top
    packages += [f"evaldag.{top}.{sub}" for sub in find_packages(top)]

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={
        "evaldag.benchmarks": ["**/*.json", "**/*.jsonl", "**/*.safetensors", "**/*.txt", "**/*.md", "**/*.gz", "**/*.csv", "**/LICENSE*"],
        "evaldag.engine": ["render/*.js", "render/*.css", "render/*.html", "render/assets/*"],
    },
)
