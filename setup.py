"""tfbneck-plugin: why is TensorFlow training slow? Trace analysis, a Keras callback and a
TensorBoard tab. The analyzer, CLI and plugin need no TensorFlow (extra ``[tensorflow]``)."""
import os

from setuptools import Extension, find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(HERE, "tfbneck_plugin", "__init__.py")) as f:
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
    python_requires=">=3.9",
    install_requires=[
        "numpy>=1.22",
        "protobuf>=4.21",  # upb C backend
        "psutil>=5.9",
        "tqdm>=4.60",
        "tensorboard>=2.12",
        "tensorboard-plugin-profile>=2.13",
        "fsspec>=2023.1",
        "scipy>=1.9.2",  # compare: Mann-Whitney U; 1.9.2: the first with Python 3.11 wheels
    ],
    extras_require={
        "tensorflow": ["tensorflow>=2.12", "tf-keras"],
        "gpu": ["nvidia-ml-py"],
        "beam": ["apache-beam>=2.50"],
        "remote": ["s3fs", "gcsfs"],
        "test": ["pytest>=7", "pytest-timeout", "hypothesis>=6", "playwright>=1.40",
                 "tensorflow>=2.12", "tf-keras", "moto[server]>=5", "s3fs", "apache-beam>=2.50"],
    },
    entry_points={
        "console_scripts": ["tfbneck = tfbneck_plugin.cli:main"],
        "tensorboard_plugins": ["bottleneck = tfbneck_plugin.plugin:BottleneckPluginLoader"],
    },
    classifiers=["Programming Language :: Python :: 3", "Topic :: Scientific/Engineering :: Artificial Intelligence"],
)
