"""tfbneck-plugin: why is TensorFlow training slow? Trace analysis, a Keras callback and a
TensorBoard tab. The analyzer, CLI and plugin need no TensorFlow (extra ``[tensorflow]``)."""
import os

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(HERE, "tfbneck_plugin", "version.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=")[1].strip().strip('"')
    raise RuntimeError("no __version__")


setup(
    name="tfbneck-plugin",
    version=version(),
    description="Tells a TensorFlow user why training is slow: CPU, device, I/O or network bound, with evidence.",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tfbneck_plugin", "tfbneck_plugin.*"]),
    # Optional C fast path of the trace reader; without a compiler the numpy path is used.
    ext_modules=[Extension("tfbneck_plugin.trace._wirescan", ["tfbneck_plugin/trace/_wirescan.c"], optional=True)],
    package_data={"tfbneck_plugin.plugin": ["static/*"]},
    # Every floor below is one that tests/run_min_versions.sh installs and tests (the
    # lowest release with a wheel for the oldest Python declared here); raise it, never guess.
    python_requires=">=3.11",
    install_requires=[
        "numpy>=1.23.2",
        "protobuf>=4.21.1",  # 4.21.0 is yanked; 4.21 is what TensorFlow 2.12/2.13 pin
        "psutil>=5.9.4",
        "tqdm>=4.60",
        "tensorboard>=2.12",
        "fsspec>=2023.1.0",
        "scipy>=1.9.2",  # compare: Mann-Whitney U; 1.9.2: the first with Python 3.11 wheels
        "rich>=12.0.0",  # tfbneck watch's live panel (Live, Group, Table.grid, Console.size setter)
        "regex>=2022.9.13",  # fleet --group-by: a search with a timeout (re has none); the first with 3.11 wheels
        "orjson>=3.7.7",  # PyTorch's Kineto JSON traces (trace/kineto.py); 3.7.7: the first with Python 3.11 wheels
    ],
    extras_require={
        # XProf (TensorBoard's Profile tab) opens the tab's "Open in Trace Viewer" links; an
        # extra, not a requirement: it more than doubles the install (docs/install.md).
        "xprof": ["tensorboard-plugin-profile>=2.13"],
        # 2.12-2.15 (Keras 2 inside TensorFlow) were seen to record only the first step of
        # a window: their own step markers interleave with the callback's. XProf comes
        # along: who profiles training opens the traces too.
        "tensorflow": ["tensorflow>=2.16.1", "tf-keras>=2.16", "tensorboard-plugin-profile>=2.13"],
        "gpu": ["nvidia-ml-py>=11.515.75"],
        "beam": ["apache-beam>=2.50"],
        "remote": ["s3fs>=2023.1.0", "gcsfs>=2023.1.0"],
        "notebook": ["pandas>=1.5.1"],  # Report.to_dataframe(); 1.5.1: the first with Python 3.11 wheels
        # The manual (mkdocs.yml, docs/): `mkdocs build --strict`, run by tests/test_docs_site.py.
        # mkdocstrings-python reads the API page's docstrings with griffe, without importing the
        # package (no TensorFlow). Floors: the releases that build has been run with.
        "docs": ["mkdocs>=1.6.1", "mkdocs-material>=9.8.2", "mkdocstrings>=1.0.8", "mkdocstrings-python>=2.0.11"],
        # s3fs/gcsfs floors here only steer pip: moto needs boto3, whose newest release
        # pins a botocore newer than any aiobotocore accepts, and without them pip resolves
        # that by falling back to s3fs 0.4.2 (2020). tests/test_min_versions.py fails when
        # the s3fs installed is more than a year old.
        "test": ["tensorboard-plugin-profile>=2.13",
                 "pytest>=7", "pytest-timeout>=2.1", "pytest-xdist>=3.8", "hypothesis>=6", "playwright>=1.65", "ruff>=0.17.6",
                 "mypy>=2.4.1,<2.5",  # pinned to a minor: a new mypy may find new errors (mypy.ini, tests/run.sh)
                 "tensorflow>=2.16.1", "tf-keras>=2.16", "moto[server]>=5", "s3fs>=2026.1", "gcsfs>=2026.1",
                 "apache-beam>=2.50", "pandas>=1.5.1", "nbclient>=0.10.0", "nbformat>=5.10.0", "ipykernel>=6.29.0",
                 "nbconvert>=7.16.5",
                 # Keras 3's other backends (the callback on JAX and PyTorch) and PyTorch's profiler
                 # (Kineto traces made by script). Pinned to the releases tested: PyPI's other torch
                 # releases for x86_64 Linux are CUDA builds of several GB; 2.13.0's CPU build is
                 # the one this project's machines hold (docs/install.md says how to get one).
                 "jax==0.10.2", "torch==2.13.0"],
    },
    entry_points={
        "console_scripts": ["tfbneck = tfbneck_plugin.cli.main:run"],
        "tensorboard_plugins": ["bottleneck = tfbneck_plugin.plugin:BottleneckPluginLoader"],
    },
    classifiers=["Programming Language :: Python :: 3", "Topic :: Scientific/Engineering :: Artificial Intelligence"],
)
