"""Maps the repository's folders under the one package ``pulsar_lb_operator`` (metadata: pyproject.toml).

The folders keep the names the design card gives them; installed, each is a sub-package of
``pulsar_lb_operator`` (``operator/`` is the package itself: ``operator`` is a standard-library module).
setuptools finds the sub-packages of each folder, so a new one needs no entry here.
"""

from setuptools import find_packages, setup

FOLDERS = {
    "pulsar_lb_operator": "operator",
    "pulsar_lb_operator.strategies": "strategies",
    "pulsar_lb_operator.simulator": "simulator",
    "pulsar_lb_operator.spark_jobs": "spark_jobs",
    "pulsar_lb_operator.benchmarks": "benchmarks",
}

package_dir: dict[str, str] = {}
packages: list[str] = []
for package, folder in FOLDERS.items():
    for sub in ["", *find_packages(folder)]:
        name = f"{package}.{sub}" if sub else package
        package_dir[name] = f"{folder}/{sub.replace('.', '/')}" if sub else folder
        packages.append(name)

setup(package_dir=package_dir, packages=packages)
