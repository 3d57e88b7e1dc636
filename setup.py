"""The package list, found rather than written out: every package under attnzoo/ and under
kernels/ (installed as attnzoo.kernels), and conf/ (attnzoo.conf). Everything else about the
distribution is in pyproject.toml."""

from setuptools import find_packages, setup


def found(folder: str, name: str) -> list[str]:
    return [name, *(f"{name}.{sub}" for sub in find_packages(folder))]


setup(packages=[*found("attnzoo", "attnzoo"), *found("kernels", "attnzoo.kernels"), "attnzoo.conf"])
